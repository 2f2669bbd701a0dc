package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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

func TestOpenRefusesBadDSN(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"oracle://x", `unknown DSN scheme "oracle"`},
		{"mysql://x", "no user"},
		{"mysql://u@/db", "no host"},
		{"mysql://u@h/db?socket=/s", "both a host and a socket"},
		{"mysql://u@h/db?charset=latin1", `unknown parameter "charset"`},
		{"mysql://u@h/db?tls=maybe", `tls="maybe"`},
		{"mysql://u@h/", "names no database"},
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

func TestMySQLDriverDSN(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"mysql://cnperf:s3cret@db.example:3307/cnperf", "cnperf:s3cret@tcp(db.example:3307)/cnperf?"},
		{"mysql://cnperf@db.example/cnperf?tls=true", "cnperf@tcp(db.example:3306)/cnperf?"},
		{"mysql://root@/cnperf?socket=/run/mysqld/mysqld.sock", "root@unix(/run/mysqld/mysqld.sock)/cnperf?"},
	}
	for _, c := range cases {
		got, err := store.MySQLDriverDSN(c.dsn)
		if err != nil || !strings.HasPrefix(got, c.want) {
			t.Errorf("MySQLDriverDSN(%q) = %q, %v; want prefix %q", c.dsn, got, err, c.want)
		}
		for _, p := range []string{"parseTime=true", "clientFoundRows=true", "sql_mode=", "timeout=10s"} {
			if !strings.Contains(got, p) {
				t.Errorf("MySQLDriverDSN(%q) = %q: no %s", c.dsn, got, p)
			}
		}
	}
}

// TestSQLiteOneWriter: a second opener of a SQLite file is refused while
// the first holds it, with an error naming the holder's pid (two servers
// on one file never coordinate their dispatch); once the first closes,
// the file opens again.
func TestSQLiteOneWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cnperf.db")
	first, err := store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := store.Open(ctx, "sqlite:"+path)
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second store opened the SQLite file its first holds")
	}
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second open: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
