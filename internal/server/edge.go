package server

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/cnperf/cnperf/internal/api"
)

// textGuard refuses, before any handler runs, a request whose path or
// query holds invalid UTF-8 or a NUL character (decoded from %00, %ff...):
// such text reaches store queries as pod uids, run ids, suites and states,
// and PostgreSQL answers it with an error (a 500 before this guard).
// Bodies get the same check when they are decoded (api.DecodeBytes).
func (s *Server) textGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequestText(r); err != nil {
			s.fail(w, r, strings.HasPrefix(r.URL.Path, "/api/v1/"), err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func checkRequestText(r *http.Request) *api.Error {
	if !cleanText(r.URL.Path) {
		return api.BadRequest("(path)", "invalid UTF-8 or NUL character in the path")
	}
	for k, vs := range r.URL.Query() {
		if !cleanText(k) {
			return api.BadRequest("(query)", "invalid UTF-8 or NUL character in a query parameter name")
		}
		for _, v := range vs {
			if !cleanText(v) {
				return api.BadRequest(k, "invalid UTF-8 or NUL character in query parameter %s", k)
			}
		}
	}
	return nil
}

// cleanText reports whether s is valid UTF-8 without NUL.
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
