package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a request error that knows its HTTP status and, for bad input,
// the field at fault. Servers answer it as JSON; clients return it.
type Error struct {
	Status  int    `json:"-"`
	Field   string `json:"field,omitempty"`
	Message string `json:"error"`
}

func (e *Error) Error() string {
	if e.Field != "" && e.Message != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// BadRequest returns a 400 error naming field.
func BadRequest(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// StatusOf returns the HTTP status of err when it is (or wraps) an *Error,
// else 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// ErrorBody is the JSON body of a v2 error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}
