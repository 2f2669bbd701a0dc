package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite connection settings. All writes go through one connection, so
// writers never contend for the database lock inside one process and
// ClaimTasks is serialised; reads use a small pool of query-only
// connections that WAL lets run beside the writer. _txlock=immediate takes
// the write lock at BEGIN, so a second process waits (busy_timeout) rather
// than failing half-way through a transaction. temp_store(MEMORY) keeps
// SQLite's temporary files (statement journals, sorts) in memory: the
// server runs with a read-only root file system and no writable /tmp, where
// SQLite finds no temporary directory and a large insert fails with
// SQLITE_IOERR_GETTEMPPATH ("disk I/O error (6410)").
const (
	sqliteCommon = "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)"
	sqliteWriter = sqliteCommon + "&_pragma=journal_mode(WAL)&_txlock=immediate"
	sqliteReader = sqliteCommon + "&_pragma=query_only(1)"
)

// sqliteDialect: "?" placeholders, RETURNING and ON CONFLICT as they are;
// times as INTEGER microseconds, JSON as TEXT; no row locks or claim lock,
// since every write goes through the one writer connection.
type sqliteDialect struct{}

func (sqliteDialect) name() string               { return "sqlite" }
func (sqliteDialect) rebind(query string) string { return query }
func (sqliteDialect) returning() bool            { return true }
func (sqliteDialect) insertsInWith() bool        { return false }
func (sqliteDialect) upsert(table, key string, cols, update []string) string {
	return onConflictUpsert(table, key, cols, update)
}
func (sqliteDialect) timeArg(t time.Time) any                            { return t.UnixMicro() }
func (sqliteDialect) jsonArg(raw json.RawMessage) any                    { return string(raw) }
func (sqliteDialect) forUpdate() string                                  { return "" }
func (sqliteDialect) lockClaims(context.Context, *sql.Tx) error          { return nil }
func (sqliteDialect) lockNodes(context.Context, *sql.Tx, []string) error { return nil }
func (d sqliteDialect) notify(_ context.Context, _ *sql.Tx, notices []Notice) error {
	return noNotices(d.name(), notices)
}
func (sqliteDialect) isUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}
func (sqliteDialect) migrations() (goose.Dialect, lock.SessionLocker, error) {
	return goose.DialectSQLite3, nil, nil
}

// openSQLite opens (creating if needed) the SQLite database at path and
// migrates it. ":memory:" gives a private in-memory database on a single
// connection (tests only: it vanishes on Close).
func openSQLite(ctx context.Context, path string) (Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path: want sqlite:PATH")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite %q: path must not contain '?' or '#'", path)
	}
	var lock *fileLock
	if path != ":memory:" {
		l, err := lockSQLite(path)
		if err != nil {
			return nil, err
		}
		lock = l
	}
	w, err := sql.Open("sqlite", path+"?"+sqliteWriter)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite %s: %w", path, err), lock.release())
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := newSQLStore(sqliteDialect{}, w, w)
	s.lock = lock
	if err := migrate(ctx, w, s.d); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite %s: %w", path, err), s.Close())
	}
	if path != ":memory:" {
		r, err := sql.Open("sqlite", path+"?"+sqliteReader)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open sqlite %s for reading: %w", path, err), s.Close())
		}
		n := max(4, runtime.GOMAXPROCS(0))
		r.SetMaxOpenConns(n)
		r.SetMaxIdleConns(n)
		s.r = r
	}
	if err := s.Ping(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open sqlite %s: %w", path, err), s.Close())
	}
	return s, nil
}
