package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// claimLockKey is the transaction-level advisory lock that serialises
// ClaimTasks across server processes sharing one database, so that the
// exclusive-node rule holds: row locks alone cannot stop two agents on
// different nodes from claiming exclusive tasks toward a shared node.
const claimLockKey = 0x636e70657266 // "cnperf"

// Pool size: enough for a busy server on a small machine.
const postgresMaxConns = 16

func postgresDialect() dialect {
	return dialect{
		name:      "postgres",
		ts:        func(t time.Time) any { return micro(t) },
		js:        func(raw json.RawMessage) any { return []byte(raw) },
		forUpdate: " FOR UPDATE",
		lockClaims: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(claimLockKey))
			return err
		},
		isUnique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
	}
}

// openPostgres connects to PostgreSQL with pgx and migrates the database.
func openPostgres(ctx context.Context, dsn string) (Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db.SetMaxOpenConns(postgresMaxConns)
	db.SetMaxIdleConns(postgresMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open postgres: %w", err), db.Close())
	}
	if err := migrate(ctx, db, "postgres"); err != nil {
		return nil, errors.Join(fmt.Errorf("open postgres: %w", err), db.Close())
	}
	return &sqlStore{d: postgresDialect(), w: db, r: db}, nil
}
