package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// dialect is everything that differs between the SQL databases the store
// runs on. The queries of agents.go, runs.go, tasks.go, dispatch.go and
// paging.go are written once, in SQL every dialect accepts, and take the
// rest from here:
//
//   - Placeholders: queries are written with "?" (one per argument, an
//     argument used twice is passed twice) and rebind turns them into the
//     database's own: "$1", "$2", ... for PostgreSQL; SQLite and MySQL take
//     "?" as it is. No query has a "?" inside a quoted literal.
//   - Rows from a write: when returning() is true (PostgreSQL, SQLite) an
//     INSERT or UPDATE ends in RETURNING and hands back what it wrote in the
//     same statement. When it is false (MySQL 8, which has no RETURNING;
//     MariaDB, which has it on INSERT from 10.5 but never on UPDATE) the
//     store takes a new row's serial key from LastInsertId, reads an
//     upserted row back by its unique key, and for an UPDATE first locks
//     the keys of the rows it will change (SELECT … FOR UPDATE), changes
//     them by key and reads them back, all in one transaction (see
//     insertKey, updateReturning and RegisterAgents).
//   - Upserts: upsert writes the INSERT that updates a row whose unique key
//     exists: ON CONFLICT (key) DO UPDATE SET c = excluded.c (PostgreSQL,
//     SQLite) or ON DUPLICATE KEY UPDATE c = VALUES(c) (MySQL, MariaDB).
//   - How a time and a JSON argument are encoded, the row-lock suffix, the
//     lock that serialises claims across processes, how a unique-key
//     violation is recognised, and the goose dialect and lock the embedded
//     migrations (migrations/NAME) run with.
//
// So a MySQL 8 / MariaDB store is one more implementation of this interface
// and one more migrations directory, not a copy of the queries.
type dialect interface {
	// name is "sqlite", "postgres", ...: also the migrations directory.
	name() string
	// rebind turns the "?" placeholders of query into the database's own.
	rebind(query string) string
	// returning reports whether INSERT and UPDATE take a RETURNING clause.
	returning() bool
	// insertsInWith reports whether a statement's WITH may INSERT (with
	// RETURNING): a run and its tasks are then one statement.
	insertsInWith() bool
	// upsert returns "INSERT INTO table (cols) VALUES (?, …)" that, when a
	// row with the same unique key column exists, sets its update columns
	// to the new values instead.
	upsert(table, key string, cols, update []string) string
	// timeArg encodes a time argument (microseconds for SQLite, a UTC
	// time.Time elsewhere).
	timeArg(time.Time) any
	// jsonArg encodes a JSON argument (never called with empty input).
	jsonArg(json.RawMessage) any
	// forUpdate is appended to a SELECT that reads rows the transaction
	// then changes ("" where the single writer already excludes others).
	forUpdate() string
	// lockClaims serialises ClaimTasks across processes sharing the
	// database, inside the claim's transaction, before it reads (MySQL; a
	// no-op for SQLite, whose writes all go through one connection, and
	// for PostgreSQL, which locks nodes instead).
	lockClaims(ctx context.Context, tx *sql.Tx) error
	// lockNodes serialises, inside the claim's transaction, the claims of
	// exclusive tasks on these nodes (node keys) and no others, before
	// the claim reads which nodes are busy (PostgreSQL; a no-op where
	// lockClaims serialises every claim).
	lockNodes(ctx context.Context, tx *sql.Tx, nodes []string) error
	// notify sends notices inside tx (PostgreSQL's NOTIFY, delivered at
	// the commit); the other databases refuse any.
	notify(ctx context.Context, tx *sql.Tx, notices []Notice) error
	// isUnique reports whether err is a unique-key violation.
	isUnique(err error) bool
	// migrations says which goose dialect the migrations run with, and the
	// session lock (nil: none) that keeps two servers starting at once from
	// migrating together.
	migrations() (goose.Dialect, lock.SessionLocker, error)
}

// noNotices is notify for the databases without NOTIFY.
func noNotices(name string, notices []Notice) error {
	if len(notices) > 0 {
		return fmt.Errorf("%w: %s sends no notices (NOTIFY is PostgreSQL's)", ErrInvalid, name)
	}
	return nil
}

// placeholders returns n comma-separated "?" placeholders.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// onConflictUpsert is upsert for the databases that write ON CONFLICT …
// DO UPDATE (PostgreSQL, SQLite).
func onConflictUpsert(table, key string, cols, update []string) string {
	set := make([]string, len(update))
	for i, c := range update {
		set[i] = c + " = excluded." + c
	}
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + placeholders(len(cols)) +
		") ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ")
}

// rebindDollar numbers the "?" placeholders of query "$1", "$2", … in
// order; a "?" inside a quoted literal is left alone.
func rebindDollar(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 2*strings.Count(query, "?"))
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// nodeLockKeys maps node keys to advisory lock keys (FNV-1a), sorted and
// without repeats: the order every claim takes them in. Two nodes may
// share a key; their claims then wait for each other, which costs time,
// never correctness.
func nodeLockKeys(nodes []string) []int32 {
	keys := make([]int32, 0, len(nodes))
	for _, n := range nodes {
		h := fnv.New32a()
		h.Write([]byte(n))
		keys = append(keys, int32(h.Sum32()))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
