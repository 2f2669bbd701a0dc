package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// MySQL settings. Claims are serialised by locking the one row of
// claim_lock (its migration makes it); the migrations by a named lock.
const (
	mysqlMaxConns      = 16
	mysqlDialTimeout   = 10 * time.Second
	mysqlMigrationLock = "cnperf_migrate"
	mysqlLockWait      = 60 // seconds a server waits for another's migration
	// mysqlDupEntry is ER_DUP_ENTRY, a unique-key violation.
	mysqlDupEntry = 1062
)

// mysqlDialect is MySQL 8 and MariaDB: "?" placeholders; no RETURNING
// (MySQL has none, MariaDB none on UPDATE), so new keys come from
// LastInsertId and changed rows are locked, updated by key and read back;
// ON DUPLICATE KEY UPDATE … VALUES(c) (which both accept; MySQL deprecates
// VALUES() there from 8.0.20 but still runs it); times as DATETIME(6) in
// UTC; JSON as LONGTEXT, so the text is kept byte for byte (MySQL's JSON
// type would rewrite it). The tests run it on MariaDB 10.11 (Debian's);
// it has not been run against a MySQL 8 server.
type mysqlDialect struct{}

func (mysqlDialect) name() string               { return "mysql" }
func (mysqlDialect) rebind(query string) string { return query }
func (mysqlDialect) returning() bool            { return false }
func (mysqlDialect) insertsInWith() bool        { return false }
func (mysqlDialect) upsert(table, key string, cols, update []string) string {
	set := make([]string, len(update))
	for i, c := range update {
		set[i] = c + " = VALUES(" + c + ")"
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + placeholders(len(cols)) +
		") ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}
func (mysqlDialect) timeArg(t time.Time) any         { return micro(t) }
func (mysqlDialect) jsonArg(raw json.RawMessage) any { return string(raw) }
func (mysqlDialect) forUpdate() string               { return " FOR UPDATE" }
func (mysqlDialect) lockClaims(ctx context.Context, tx *sql.Tx) error {
	var id int
	return tx.QueryRowContext(ctx, "SELECT id FROM claim_lock WHERE id = 1 FOR UPDATE").Scan(&id)
}
func (mysqlDialect) lockNodes(context.Context, *sql.Tx, []string) error { return nil }
func (d mysqlDialect) notify(_ context.Context, _ *sql.Tx, notices []Notice) error {
	return noNotices(d.name(), notices)
}
func (mysqlDialect) isUnique(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == mysqlDupEntry
}
func (mysqlDialect) migrations() (goose.Dialect, lock.SessionLocker, error) {
	return goose.DialectMySQL, namedLock{}, nil
}

// namedLock is a goose session lock on MySQL's GET_LOCK.
type namedLock struct{}

func (namedLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", mysqlMigrationLock, mysqlLockWait).Scan(&got); err != nil {
		return fmt.Errorf("take lock %s: %w", mysqlMigrationLock, err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("lock %s: another server held it for %d s", mysqlMigrationLock, mysqlLockWait)
	}
	return nil
}

func (namedLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", mysqlMigrationLock).Scan(&released); err != nil {
		return fmt.Errorf("release lock %s: %w", mysqlMigrationLock, err)
	}
	return nil
}

// MySQLDriverDSN turns cnperf's MySQL DSN,
//
//	mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?tls=true|skip-verify|preferred|false]
//	mysql://USER[:PASSWORD]@/DATABASE?socket=PATH
//
// into the go-sql-driver/mysql DSN the store connects with: times parsed
// in UTC, found (not changed) rows counted, strict SQL mode, a 10 s dial
// timeout. DATABASE may be empty only for callers that create databases
// (tests); Open refuses it.
func MySQLDriverDSN(dsn string) (string, error) {
	cfg, err := mysqlConfig(dsn)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

func mysqlConfig(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql DSN: %w", err)
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("mysql DSN: scheme %q, want mysql://", u.Scheme)
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if cfg.User == "" {
		return nil, errors.New("mysql DSN: no user: want mysql://USER[:PASSWORD]@HOST/DATABASE")
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if strings.Contains(cfg.DBName, "/") {
		return nil, fmt.Errorf("mysql DSN: database name %q has a '/'", cfg.DBName)
	}
	q := u.Query()
	for k := range q {
		if k != "socket" && k != "tls" {
			return nil, fmt.Errorf("mysql DSN: unknown parameter %q: want socket or tls", k)
		}
	}
	switch socket := q.Get("socket"); {
	case socket != "" && u.Host != "":
		return nil, errors.New("mysql DSN: both a host and a socket: give one")
	case socket != "":
		cfg.Net, cfg.Addr = "unix", socket
	case u.Host == "":
		return nil, errors.New("mysql DSN: no host: want mysql://USER@HOST[:PORT]/DATABASE or ?socket=PATH")
	default:
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.Net, cfg.Addr = "tcp", host
	}
	switch tls := q.Get("tls"); tls {
	case "", "false":
	case "true", "skip-verify", "preferred":
		cfg.TLSConfig = tls
	default:
		return nil, fmt.Errorf("mysql DSN: tls=%q: want true, skip-verify, preferred or false", tls)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = true // TouchAgents counts the rows it matched, as the other dialects do
	cfg.Timeout = mysqlDialTimeout
	cfg.Params = map[string]string{"sql_mode": "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"}
	return cfg, nil
}

// readCommitted opens connections at READ COMMITTED, PostgreSQL's level,
// rather than InnoDB's REPEATABLE READ: the store's transactions read the
// latest committed rows and lock no gaps. SET SESSION TRANSACTION is the
// one spelling MySQL 8 and MariaDB share.
type readCommitted struct{ driver.Connector }

func (c readCommitted) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		return nil, errors.Join(errors.New("mysql connection cannot execute statements"), conn.Close())
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nil); err != nil {
		return nil, errors.Join(fmt.Errorf("set isolation level: %w", err), conn.Close())
	}
	return conn, nil
}

// openMySQL connects to MySQL or MariaDB and migrates the database.
func openMySQL(ctx context.Context, dsn string) (Store, error) {
	cfg, err := mysqlConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("open mysql: the DSN names no database: want mysql://USER@HOST/DATABASE")
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	db := sql.OpenDB(readCommitted{conn})
	db.SetMaxOpenConns(mysqlMaxConns)
	db.SetMaxIdleConns(mysqlMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour) // under the server's wait_timeout (8 h by default)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open mysql: %w", err), db.Close())
	}
	d := mysqlDialect{}
	if err := migrate(ctx, db, d); err != nil {
		return nil, errors.Join(fmt.Errorf("open mysql: %w", err), db.Close())
	}
	return newSQLStore(d, db, db), nil
}
