package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// nodeLockClass is the first key of the transaction-level advisory
// locks, one per node, that a claim of exclusive tasks holds on their
// nodes, so the exclusive-node rule holds across server processes
// sharing one database (row locks alone cannot stop two agents on
// different nodes from claiming exclusive tasks toward a shared node),
// while claims on other nodes go on beside it.
const nodeLockClass = 0x636e7066 // "cnpf"

// Pool size: enough for a busy server on a small machine.
const postgresMaxConns = 16

// postgresDialect: "$N" placeholders, RETURNING and ON CONFLICT; times as
// TIMESTAMPTZ, JSON as json; SELECT … FOR UPDATE; exclusive claims
// serialised per node by transaction-level advisory locks.
type postgresDialect struct{}

func (postgresDialect) name() string               { return "postgres" }
func (postgresDialect) rebind(query string) string { return rebindDollar(query) }
func (postgresDialect) returning() bool            { return true }
func (postgresDialect) insertsInWith() bool        { return true }
func (postgresDialect) upsert(table, key string, cols, update []string) string {
	return onConflictUpsert(table, key, cols, update)
}
func (postgresDialect) timeArg(t time.Time) any                   { return micro(t) }
func (postgresDialect) jsonArg(raw json.RawMessage) any           { return []byte(raw) }
func (postgresDialect) forUpdate() string                         { return " FOR UPDATE" }
func (postgresDialect) lockClaims(context.Context, *sql.Tx) error { return nil }
func (postgresDialect) lockNodes(ctx context.Context, tx *sql.Tx, nodes []string) error {
	keys := nodeLockKeys(nodes)
	if len(keys) == 0 {
		return nil
	}
	// One statement for all of them (each statement is a round trip on
	// the claim), taken in the array's order as unnest yields its rows:
	// sorted, the same order for every claim, so two claims never wait
	// for each other's locks in a cycle.
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1, k) FROM unnest($2::int4[]) AS k", int32(nodeLockClass), keys)
	return err
}

// noticesPerStatement bounds the pg_notify calls of one statement.
const noticesPerStatement = 16

// notify sends the notices in as few statements as noticesPerStatement
// allows (a statement is a round trip inside the transaction).
func (postgresDialect) notify(ctx context.Context, tx *sql.Tx, notices []Notice) error {
	for chunk := range slices.Chunk(notices, noticesPerStatement) {
		var q strings.Builder
		args := make([]any, 0, 2*len(chunk))
		q.WriteString("SELECT ")
		for i, n := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "pg_notify($%d, $%d)", 2*i+1, 2*i+2)
			args = append(args, n.Channel, n.Payload)
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	return nil
}

func (postgresDialect) isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
func (postgresDialect) migrations() (goose.Dialect, lock.SessionLocker, error) {
	locker, err := lock.NewPostgresSessionLocker()
	return goose.DialectPostgres, locker, err
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
	if err := migrate(ctx, db, postgresDialect{}); err != nil {
		return nil, errors.Join(fmt.Errorf("open postgres: %w", err), db.Close())
	}
	s := newSQLStore(postgresDialect{}, db, db)
	s.hot = newLane(db, laneConns)
	return s, nil
}
