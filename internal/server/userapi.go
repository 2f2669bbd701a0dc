package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// The user API's handlers are in a file per resource: userapi_agents.go,
// userapi_runs.go and userapi_tasks.go. This file holds what they share and
// the health and OpenAPI endpoints.

// wrapNotFound turns the store's ErrNotFound into a 404 naming what.
func wrapNotFound(err error, what string) error {
	if errors.Is(err, store.ErrNotFound) {
		return &api.Error{Status: http.StatusNotFound, Message: what + ": not found"}
	}
	return err
}

// pageOf reads limit and after query parameters.
func pageOf(r *http.Request) (store.Page, error) {
	var p store.Page
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxPageLimit {
			return p, api.BadRequest("limit", "%q: want 1-%d", v, store.MaxPageLimit)
		}
		p.Limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return p, api.BadRequest("after", "%q: want the next_after value of the previous page", v)
		}
		p.AfterID = n
	}
	return p, nil
}

// pageFull reports whether a page of n items asked for with p is full, so
// that the answer names where the next page starts.
func pageFull(p store.Page, n int) bool {
	limit := p.Limit
	if limit == 0 {
		limit = store.DefaultPageLimit
	}
	return n == limit
}

func (s *Server) cancelReason(w http.ResponseWriter, r *http.Request) (string, error) {
	var cr api.CancelRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, api.MaxBody, &cr); err != nil {
			return "", err
		}
	}
	if err := checkLen("reason", cr.Reason, MaxTextLen); err != nil {
		return "", err
	}
	if cr.Reason == "" {
		cr.Reason = "cancelled by user"
	}
	return cr.Reason, nil
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.st.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "store unreachable: " + err.Error()})
		return
	}
	if err := s.writeReady(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: cannotWriteMsg(err)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.openapi)
}
