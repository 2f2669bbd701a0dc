package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// statusOf is the one place errors become HTTP status codes.
func statusOf(err error) int {
	if st := api.StatusOf(err); st != 0 {
		return st
	}
	switch {
	case store.CannotWrite(err):
		return http.StatusServiceUnavailable // readiness.go
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// fail answers err: in the v1 envelope (status = HTTP status) or as a v2
// error object. Internal errors are logged and answered without detail.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, v1 bool, err error) {
	code := statusOf(err)
	msg := err.Error()
	field := ""
	var ae *api.Error
	if errors.As(err, &ae) {
		field = ae.Field
		msg = ae.Error()
	}
	if store.CannotWrite(err) {
		msg = s.storeCannotWrite(r, err)
		w.Header().Set("Retry-After", writeRetryAfter)
	} else if code == http.StatusInternalServerError && r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		// The caller went away (an agent stopping, a client's deadline):
		// nobody reads the answer and the server did nothing wrong.
		s.log.Debug("request abandoned by its caller", "method", r.Method, "path", r.URL.Path, "err", err)
		code = 499 // nginx's "client closed request"; never seen by the caller
	} else if code == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error (see the server log)"
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	if v1 {
		writeJSON(w, code, api.Envelope{Status: code, Msg: msg, Data: json.RawMessage("null")})
		return
	}
	writeJSON(w, code, api.ErrorBody{Error: msg, Field: field})
}

// okV1 answers data in the seed's envelope.
func (s *Server) okV1(w http.ResponseWriter, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		http.Error(w, "encode answer", http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, api.Envelope{Status: 0, Msg: "", Data: b})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"encode answer"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// decode reads a request body strictly with a size limit.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return api.Decode(r.Body, limit, v)
}
