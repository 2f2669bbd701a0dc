package server

import (
	"context"
	"net/http"
)

// The agent API's handlers are in a file per concern: agentapi_heartbeat.go,
// agentapi_tasks.go (fetch, start, server hand-off) and agentapi_report.go.
// This file holds what they share.

// jsonCall answers a request whose body decodes into In (at most limit
// bytes) with what fn makes of it, in the seed's envelope (v1) or as plain
// JSON (v2); check, when set, vets the decoded body against the request
// first.
func jsonCall[In, Out any](s *Server, v1 bool, limit int64, check func(*http.Request, *In) error, fn func(context.Context, In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if err := decode(w, r, limit, &in); err != nil {
			s.fail(w, r, v1, err)
			return
		}
		if check != nil {
			if err := check(r, &in); err != nil {
				s.fail(w, r, v1, err)
				return
			}
		}
		out, err := fn(r.Context(), in)
		if err != nil {
			s.fail(w, r, v1, err)
			return
		}
		if v1 {
			s.okV1(w, out)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}
