package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// sqlStore implements Store over database/sql for every dialect. Its
// methods live by concern: agents.go, runs.go, tasks.go, dispatch.go
// (claims, busy nodes, start and completion) and paging.go; this file holds
// what they share: scanning rows, transactions, and reading back the rows a
// write changed (with RETURNING or without, see dialect).
type sqlStore struct {
	d dialect
	w *sql.DB // writes (SQLite: one connection)
	r *sql.DB // reads (may be w)

	lock *fileLock // SQLite's one-writer lock (nil otherwise), released by Close
	hot  *lane     // connections kept for a run's creation (PostgreSQL; nil otherwise)

	upsertAgentSQL string // the heartbeat upsert, rebound (with RETURNING when the dialect has it)
	readAgentSQL   string // reads an agent back by pod_uid, rebound
	writeProbeSQL  string // /readyz's write probe (see CheckWrite), rebound
	recordPairSQL  string // RecordMatrixPair's upsert, rebound

	prepMu     sync.Mutex
	recordPair *sql.Stmt // recordPairSQL prepared once (nil until first used)
}

func newSQLStore(d dialect, w, r *sql.DB) *sqlStore {
	s := &sqlStore{d: d, w: w, r: r}
	upsert := d.upsert("agents", "pod_uid", agentWriteCols, agentUpdateCols)
	if d.returning() {
		upsert += " RETURNING " + agentCols
	}
	s.upsertAgentSQL = d.rebind(upsert)
	s.readAgentSQL = d.rebind("SELECT " + agentCols + " FROM agents WHERE pod_uid = ?")
	s.writeProbeSQL = d.rebind(d.upsert("write_probe", "id", []string{"id", "toggle"}, []string{"toggle"}))
	s.recordPairSQL = recordPairSQL(d)
	return s
}

const (
	agentCols = "id, pod_uid, pod_name, pod_namespace, pod_ip, node_name, node_ip, host_network, responder_addr, version, status, register_time, last_heartbeat, node_labels"
	taskCols  = "id, task_id, run_id, src_pod_uid, src_pod_ip, dst_pod_uid, dst_pod_ip, type, param, spec, state, reason, raw_size, result, exclusive, timeout_ns, deadline, created_at, dispatched_at, started_at, finished_at, updated_at, report_id, late_reason, stopped_at, stop_reason"
	runCols   = "seq, id, suite, params, state, allow_concurrency, created_at, updated_at, finished_at"

	activeStates = "('dispatched', 'running')"
	openStates   = "('pending', 'dispatched', 'running')"
)

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// querier is *sql.DB, *sql.Tx or *sql.Conn.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// tsScan reads a time column stored either as microseconds (SQLite) or as
// a timestamp (PostgreSQL, MySQL).
type tsScan struct {
	t     time.Time
	valid bool
}

func (s *tsScan) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		s.valid = false
	case int64:
		s.t, s.valid = time.UnixMicro(x).UTC(), true
	case time.Time:
		s.t, s.valid = x.UTC(), true
	default:
		return fmt.Errorf("scan time: unexpected %T", v)
	}
	return nil
}

func (s tsScan) ptr() *time.Time {
	if !s.valid {
		return nil
	}
	t := s.t
	return &t
}

func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// timeOrNil is timeArg of *t, or NULL.
func (s *sqlStore) timeOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.d.timeArg(*t)
}

func (s *sqlStore) jsOrNil(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return s.d.jsonArg(raw)
}

func rawOrNil(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// agentColsOf is agentCols, each qualified with the table's alias.
func agentColsOf(alias string) string {
	return alias + "." + strings.ReplaceAll(agentCols, ", ", ", "+alias+".")
}

// extraScan scans a row's columns, then extra's.
type extraScan struct {
	r     rowScanner
	extra []any
}

func (e extraScan) Scan(dest ...any) error { return e.r.Scan(append(dest, e.extra...)...) }

func scanAgent(r rowScanner) (Agent, error) {
	var a Agent
	var reg, hb tsScan
	var status int64
	var labels string
	err := r.Scan(&a.ID, &a.PodUID, &a.PodName, &a.PodNamespace, &a.PodIP, &a.NodeName, &a.NodeIP,
		&a.HostNetwork, &a.ResponderAddr, &a.Version, &status, &reg, &hb, &labels)
	a.Status, a.RegisterTime, a.LastHeartbeat = AgentStatus(status), reg.t, hb.t
	if err == nil && labels != "" {
		if jerr := json.Unmarshal([]byte(labels), &a.NodeLabels); jerr != nil {
			err = fmt.Errorf("agent %s: node labels: %w", a.PodUID, jerr)
		}
	}
	return a, err
}

func scanTask(r rowScanner) (Task, error) {
	var t Task
	var runID sql.NullString
	var spec, result []byte
	var state string
	var timeout int64
	var deadline, created, dispatched, started, finished, updated, stopped tsScan
	err := r.Scan(&t.ID, &t.TaskID, &runID, &t.SrcPodUID, &t.SrcPodIP, &t.DstPodUID, &t.DstPodIP,
		&t.Type, &t.Param, &spec, &state, &t.Reason, &t.RawSize, &result, &t.Exclusive, &timeout,
		&deadline, &created, &dispatched, &started, &finished, &updated, &t.ReportID, &t.LateReason, &stopped, &t.StopReason)
	if err != nil {
		return Task{}, err
	}
	t.RunID = runID.String
	t.Spec, t.Result = rawOrNil(spec), rawOrNil(result)
	t.State = TaskState(state)
	t.Timeout = time.Duration(timeout)
	t.Deadline, t.DispatchedAt, t.StartedAt, t.FinishedAt = deadline.ptr(), dispatched.ptr(), started.ptr(), finished.ptr()
	t.StoppedAt = stopped.ptr()
	t.CreatedAt, t.UpdatedAt = created.t, updated.t
	return t, nil
}

func scanRun(r rowScanner) (Run, error) {
	var run Run
	var params []byte
	var state string
	var created, updated, finished tsScan
	err := r.Scan(&run.Seq, &run.ID, &run.Suite, &params, &state, &run.AllowConcurrency, &created, &updated, &finished)
	if err != nil {
		return Run{}, err
	}
	run.Params = rawOrNil(params)
	run.State = RunState(state)
	run.CreatedAt, run.UpdatedAt, run.FinishedAt = created.t, updated.t, finished.ptr()
	return run, nil
}

func scanKey(r rowScanner) (int64, error) {
	var k int64
	err := r.Scan(&k)
	return k, err
}

func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// inTx runs fn in a write transaction, committing when it returns nil.
func (s *sqlStore) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return finishTx(tx, fn)
}

// inHotTx is inTx on a connection of the creation lane (lane.go) when
// one is free. A lane connection that cannot begin (one the server
// dropped; nothing ran on it) is closed and the pool's used instead, as
// the pool itself would.
func (s *sqlStore) inHotTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	c := s.hot.get(ctx)
	if c == nil {
		return s.inTx(ctx, fn)
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		s.hot.put(c, true)
		return s.inTx(ctx, fn)
	}
	err = finishTx(tx, fn)
	s.hot.put(c, err != nil)
	return err
}

// finishTx runs fn in tx and commits, or rolls back when either fails.
func finishTx(tx *sql.Tx, fn func(tx *sql.Tx) error) (err error) {
	defer func() {
		if err != nil {
			if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
			}
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// insertKeySQL returns the INSERT statement insert, rebound, with
// "RETURNING key" when the dialect has it: what newKey runs.
func (s *sqlStore) insertKeySQL(insert, key string) string {
	if s.d.returning() {
		insert += " RETURNING " + key
	}
	return s.d.rebind(insert)
}

// statement is a query with its text bound: *sql.Stmt, or bound.
type statement interface {
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
}

// bound is a query text to run on q without preparing it.
type bound struct {
	q     querier
	query string
}

func (b bound) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return b.q.QueryRowContext(ctx, b.query, args...)
}

func (b bound) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return b.q.ExecContext(ctx, b.query, args...)
}

// newKey runs an INSERT from insertKeySQL and returns the new row's serial
// key: from RETURNING, or else from LastInsertId.
func (s *sqlStore) newKey(ctx context.Context, insert statement, args ...any) (int64, error) {
	if s.d.returning() {
		return scanKey(insert.QueryRowContext(ctx, args...))
	}
	res, err := insert.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// update is "UPDATE table SET set WHERE where" ("?" placeholders, their
// arguments in setArgs then whereArgs) whose changed rows are read back as
// cols; key is the table's serial key column.
type update struct {
	table, key, cols string
	set              string
	setArgs          []any
	where            string
	whereArgs        []any
}

// updateReturning runs u in tx and returns the rows it changed, scanned
// by scan. With RETURNING that is one statement; without, it locks the
// keys of the matching rows (SELECT … FOR UPDATE), updates those keys and
// reads them back in key order. A nil tx runs u alone: as one statement,
// or in a transaction of its own when it takes three.
func updateReturning[T any](ctx context.Context, s *sqlStore, tx *sql.Tx, u update, scan func(rowScanner) (T, error)) ([]T, error) {
	if s.d.returning() {
		var q querier = s.w
		if tx != nil {
			q = tx
		}
		rows, err := q.QueryContext(ctx, s.d.rebind("UPDATE "+u.table+" SET "+u.set+" WHERE "+u.where+" RETURNING "+u.cols),
			append(append([]any{}, u.setArgs...), u.whereArgs...)...)
		if err != nil {
			return nil, err
		}
		return collect(rows, scan)
	}
	if tx == nil {
		var out []T
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			out, err = updateReturning(ctx, s, tx, u, scan)
			return err
		})
		return out, err
	}
	rows, err := tx.QueryContext(ctx, s.d.rebind("SELECT "+u.key+" FROM "+u.table+" WHERE "+u.where+" ORDER BY "+u.key+s.d.forUpdate()), u.whereArgs...)
	if err != nil {
		return nil, err
	}
	keys, err := collect(rows, scanKey)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	byKey := " WHERE " + u.key + " IN (" + placeholders(len(keys)) + ")"
	keyArgs := make([]any, len(keys))
	for i, k := range keys {
		keyArgs[i] = k
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE "+u.table+" SET "+u.set+byKey), append(append([]any{}, u.setArgs...), keyArgs...)...); err != nil {
		return nil, err
	}
	if rows, err = tx.QueryContext(ctx, s.d.rebind("SELECT "+u.cols+" FROM "+u.table+byKey+" ORDER BY "+u.key), keyArgs...); err != nil {
		return nil, err
	}
	return collect(rows, scan)
}

// updateOne is updateReturning for an update of at most one row: the row,
// or sql.ErrNoRows when none matched.
func updateOne[T any](ctx context.Context, s *sqlStore, tx *sql.Tx, u update, scan func(rowScanner) (T, error)) (T, error) {
	rows, err := updateReturning(ctx, s, tx, u, scan)
	if err == nil && len(rows) == 0 {
		err = sql.ErrNoRows
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return rows[0], nil
}

// inList returns "(?, ?, …)" for the values and the values as arguments.
func inList(values []string) (string, []any) {
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = v
	}
	return "(" + placeholders(len(values)) + ")", args
}

func (s *sqlStore) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

func (s *sqlStore) Close() error {
	var err error
	s.prepMu.Lock()
	if s.recordPair != nil {
		err = s.recordPair.Close()
	}
	s.prepMu.Unlock()
	s.hot.close()
	err = errors.Join(err, s.w.Close())
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return errors.Join(err, s.lock.release())
}
