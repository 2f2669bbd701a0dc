package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestConformance runs the shared suite against SQLite and PostgreSQL.
func TestConformance(t *testing.T) {
	storetest.ForEach(t, storetest.Run)
}

// TestConformanceWithoutReturning runs the suite on SQLite through the
// statements a database without RETURNING gets (see dialect).
func TestConformanceWithoutReturning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cnperf.db")
	storetest.RunWith(t, func(t *testing.T) store.Store {
		return storetest.OpenWith(t, func(ctx context.Context) (store.Store, error) {
			return store.OpenSQLiteWithoutReturning(ctx, path)
		})
	})
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
