// Package storetest holds the conformance suite every store.Store
// implementation must pass (Run), and ForEach, which gives a test a fresh,
// empty database of each implementation: SQLite in a temp dir, and
// PostgreSQL as a new database on the server named by
// CNPERF_TEST_POSTGRES_DSN (scripts/pg-test.sh start prints one; make test
// starts it). Without that variable the PostgreSQL half is skipped with a
// loud reason, never silently passed.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// EnvPostgresDSN names the variable holding the test PostgreSQL's DSN.
const EnvPostgresDSN = "CNPERF_TEST_POSTGRES_DSN"

// ForEach runs fn as a subtest per store implementation ("sqlite",
// "postgres"), each with the DSN of a fresh, empty database that is
// removed afterwards.
func ForEach(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, PostgresDSN(t))
	})
}

// PostgresDSN creates a fresh database on the test PostgreSQL server, drops
// it when the test ends, and returns its DSN. It skips the test, loudly,
// when CNPERF_TEST_POSTGRES_DSN is unset.
func PostgresDSN(t *testing.T) string {
	t.Helper()
	base := os.Getenv(EnvPostgresDSN)
	if base == "" {
		t.Skipf("SKIPPED: PostgreSQL store tests need %s (run `make test`, or export %s=$(scripts/pg-test.sh start))", EnvPostgresDSN, EnvPostgresDSN)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s=%q: want a postgres:// URL", EnvPostgresDSN, base)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "cnperf_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("open test PostgreSQL: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database on %s: %v", redact(base), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := sql.Open("pgx", base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
		}
		return u.String()
	}
	return fmt.Sprintf("%.20s...", strings.TrimSpace(dsn))
}
