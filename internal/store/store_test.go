package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestConformance runs the shared suite against SQLite and PostgreSQL.
func TestConformance(t *testing.T) {
	storetest.ForEach(t, storetest.Run)
}

func TestOpenRefusesUnknownDSN(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"mysql://x", `unknown DSN scheme "mysql"`},
		{"sqlite:", "empty path"},
		{"sqlite:/tmp/x?mode=ro", "must not contain"},
	}
	for _, c := range cases {
		t.Run(c.dsn, func(t *testing.T) {
			_, err := store.Open(context.Background(), c.dsn)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open(%q): %v, want an error containing %q", c.dsn, err, c.want)
			}
		})
	}
}
