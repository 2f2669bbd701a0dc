// Package storetest holds the conformance suite every store.Store
// implementation must pass (Run), and ForEach, which gives a test a fresh,
// empty database of each implementation: SQLite in a temp dir, PostgreSQL
// as a new database on the server named by CNPERF_TEST_POSTGRES_DSN
// (scripts/pg-test.sh start prints one), and MySQL as a new database on
// the MariaDB or MySQL server named by CNPERF_TEST_MYSQL_DSN
// (scripts/mysql-test.sh start prints one); make test starts both. Without
// a variable that half is skipped with a loud reason, never silently
// passed.
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

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/cnperf/cnperf/internal/store"
)

// The variables holding the test database servers' DSNs.
const (
	EnvPostgresDSN = "CNPERF_TEST_POSTGRES_DSN"
	EnvMySQLDSN    = "CNPERF_TEST_MYSQL_DSN"
)

// ForEach runs fn as a subtest per store implementation ("sqlite",
// "postgres", "mysql"), each with the DSN of a fresh, empty database that is
// removed afterwards.
func ForEach(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, PostgresDSN(t))
	})
	t.Run("mysql", func(t *testing.T) {
		fn(t, MySQLDSN(t))
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
	name := testDatabaseName()
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

// MySQLDSN creates a fresh database on the test MySQL or MariaDB server,
// drops it when the test ends, and returns its DSN. It skips the test,
// loudly, when CNPERF_TEST_MYSQL_DSN is unset.
func MySQLDSN(t *testing.T) string {
	t.Helper()
	base := os.Getenv(EnvMySQLDSN)
	if base == "" {
		t.Skipf("SKIPPED: MySQL store tests need %s (run `make test`, or export %s=$(scripts/mysql-test.sh start))", EnvMySQLDSN, EnvMySQLDSN)
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "mysql" {
		t.Fatalf("%s=%q: want a mysql:// URL", EnvMySQLDSN, base)
	}
	admin := openMySQLAdmin(t, base)
	defer admin.Close()
	name := testDatabaseName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database on %s: %v", redact(base), err)
	}
	t.Cleanup(func() {
		admin := openMySQLAdmin(t, base)
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func openMySQLAdmin(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	driverDSN, err := store.MySQLDriverDSN(dsn)
	if err != nil {
		t.Fatalf("%s: %v", EnvMySQLDSN, err)
	}
	db, err := sql.Open("mysql", driverDSN)
	if err != nil {
		t.Fatalf("open test MySQL: %v", err)
	}
	return db
}

// testDatabaseName returns a new database name: cnperf_test_ and 12 hex
// digits.
func testDatabaseName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "cnperf_test_" + hex.EncodeToString(b[:])
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
