package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text that a store cannot hold is refused at the API edge: PostgreSQL's
// text and jsonb refuse NUL and invalid UTF-8 (a 500 before this check),
// and SQLite would store bytes no client can read back as JSON. A request
// body, path or query parameter holding either is a 400 naming where.

// checkBodyText refuses a JSON body that is not valid UTF-8 or holds a NUL
// character (the escape \u0000) in any string, key or value, naming the
// JSON path of the first one.
func checkBodyText(data []byte) *Error {
	if !utf8.Valid(data) {
		return &Error{Status: http.StatusBadRequest, Field: "(body)",
			Message: fmt.Sprintf("not valid UTF-8 at byte %d", invalidUTF8At(data))}
	}
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return nil // the common case: no scan
	}
	if path, ok := nulPath(data); ok {
		return &Error{Status: http.StatusBadRequest, Field: path, Message: "NUL character (\\u0000) not allowed"}
	}
	return nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// nulPath walks the JSON tokens of data and returns the path ("tasks[1].param",
// "(body)" for a top-level string) of the first string holding NUL.
func nulPath(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		key    string // object: the current key
		index  int    // array: the current index
		inKey  bool   // object: the next string is a key
	}
	var stack []*frame
	path := func(last string) string {
		var sb strings.Builder
		for _, f := range stack {
			if f.object {
				if sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		if last != "" {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(last)
		}
		if sb.Len() == 0 {
			return "(body)"
		}
		return sb.String()
	}
	// after a value in the innermost container
	next := func() {
		if n := len(stack); n > 0 {
			if f := stack[n-1]; f.object {
				f.inKey = true
			} else {
				f.index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{object: true, inKey: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				next()
			}
		case string:
			if top != nil && top.object && top.inKey {
				if strings.ContainsRune(v, 0) {
					return path(v), true
				}
				top.key, top.inKey = v, false
				continue
			}
			if strings.ContainsRune(v, 0) {
				return path(""), true
			}
			next()
		default:
			next()
		}
	}
}
