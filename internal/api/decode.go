package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Body size limits.
const (
	// MaxBody bounds an ordinary request body.
	MaxBody = 1 << 20
	// MaxReportBody bounds a result report (raw tool output can be long).
	MaxReportBody = 8 << 20
)

// Decode reads one JSON value from r into v strictly: unknown fields,
// trailing data, a wrong type or a body over limit bytes are errors (an
// *Error with status 400 or 413) that name the field or position.
func Decode(r io.Reader, limit int64, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(mbe.Limit)
		}
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("read body: %v", err)}
	}
	if int64(len(data)) > limit {
		return tooLarge(limit)
	}
	return DecodeBytes(data, v)
}

func tooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("body larger than %d bytes", limit)}
}

// DecodeBytes decodes data into v strictly (see Decode). A body that is
// not valid UTF-8 or holds a NUL character in any string is refused too
// (400 naming the JSON path): no store can keep such text.
func DecodeBytes(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &Error{Status: http.StatusBadRequest, Message: "empty body: want a JSON value"}
	}
	if err := checkBodyText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(data, err)
	}
	if dec.More() {
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("trailing data after the JSON value at byte %d", dec.InputOffset())}
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("trailing data after the JSON value at byte %d", dec.InputOffset())}
	}
	return nil
}

func decodeError(data []byte, err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)}
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(body)"
		}
		return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value)}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("malformed JSON: unexpected end after %d bytes", len(data))}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Status: http.StatusBadRequest, Field: name, Message: "unknown field"}
	}
	// Errors from a type's own UnmarshalJSON (durations, for example).
	return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("invalid JSON value: %v", err)}
}
