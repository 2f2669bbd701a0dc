package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// dialect holds what differs between SQLite and PostgreSQL. The SQL text is
// shared: both accept $N placeholders, ON CONFLICT … DO UPDATE and
// RETURNING.
type dialect struct {
	name string
	// ts encodes a time argument: microseconds for SQLite, time.Time for
	// PostgreSQL.
	ts func(time.Time) any
	// js encodes a JSON argument (never called with empty input).
	js func(json.RawMessage) any
	// forUpdate is appended to a SELECT that reads a row the transaction
	// then changes.
	forUpdate string
	// lockClaims serialises ClaimTasks across processes (nil: the single
	// writer connection already does).
	lockClaims func(ctx context.Context, tx *sql.Tx) error
	// isUnique reports a unique-constraint violation.
	isUnique func(error) bool
}

// sqlStore implements Store over database/sql for both dialects.
type sqlStore struct {
	d dialect
	w *sql.DB // writes (SQLite: one connection)
	r *sql.DB // reads (may be w)
}

const (
	agentCols = "id, pod_uid, pod_name, pod_namespace, pod_ip, node_name, node_ip, host_network, responder_addr, version, status, register_time, last_heartbeat"
	taskCols  = "id, task_id, run_id, src_pod_uid, src_pod_ip, dst_pod_uid, dst_pod_ip, type, param, spec, state, reason, raw_result, result, exclusive, timeout_ns, deadline, created_at, dispatched_at, started_at, finished_at, updated_at, report_id"
	runCols   = "seq, id, suite, params, state, allow_concurrency, created_at, updated_at, finished_at"

	activeStates = "('dispatched', 'running')"
	openStates   = "('pending', 'dispatched', 'running')"
)

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// tsScan reads a time column stored either as microseconds (SQLite) or as
// a timestamp (PostgreSQL).
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

func (s *sqlStore) tsOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.d.ts(*t)
}

func (s *sqlStore) jsOrNil(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return s.d.js(raw)
}

func rawOrNil(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

func scanAgent(r rowScanner) (Agent, error) {
	var a Agent
	var reg, hb tsScan
	var status int64
	err := r.Scan(&a.ID, &a.PodUID, &a.PodName, &a.PodNamespace, &a.PodIP, &a.NodeName, &a.NodeIP,
		&a.HostNetwork, &a.ResponderAddr, &a.Version, &status, &reg, &hb)
	a.Status, a.RegisterTime, a.LastHeartbeat = AgentStatus(status), reg.t, hb.t
	return a, err
}

func scanTask(r rowScanner) (Task, error) {
	var t Task
	var runID sql.NullString
	var spec, result []byte
	var state string
	var timeout int64
	var deadline, created, dispatched, started, finished, updated tsScan
	err := r.Scan(&t.ID, &t.TaskID, &runID, &t.SrcPodUID, &t.SrcPodIP, &t.DstPodUID, &t.DstPodIP,
		&t.Type, &t.Param, &spec, &state, &t.Reason, &t.RawResult, &result, &t.Exclusive, &timeout,
		&deadline, &created, &dispatched, &started, &finished, &updated, &t.ReportID)
	if err != nil {
		return Task{}, err
	}
	t.RunID = runID.String
	t.Spec, t.Result = rawOrNil(spec), rawOrNil(result)
	t.State = TaskState(state)
	t.Timeout = time.Duration(timeout)
	t.Deadline, t.DispatchedAt, t.StartedAt, t.FinishedAt = deadline.ptr(), dispatched.ptr(), started.ptr(), finished.ptr()
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

// ---- agents ----

const upsertAgentSQL = `INSERT INTO agents (pod_uid, pod_name, pod_namespace, pod_ip, node_name, node_ip,
	host_network, responder_addr, version, status, register_time, last_heartbeat)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
ON CONFLICT (pod_uid) DO UPDATE SET pod_name = excluded.pod_name, pod_namespace = excluded.pod_namespace,
	pod_ip = excluded.pod_ip, node_name = excluded.node_name, node_ip = excluded.node_ip,
	host_network = excluded.host_network, responder_addr = excluded.responder_addr,
	version = excluded.version, status = excluded.status, last_heartbeat = excluded.last_heartbeat
RETURNING ` + agentCols

func (s *sqlStore) heartbeatArgs(a Agent, now time.Time) ([]any, error) {
	if a.PodUID == "" {
		return nil, fmt.Errorf("heartbeat: %w: pod_uid is empty", ErrInvalid)
	}
	switch a.Status {
	case 0:
		a.Status = AgentFree
	case AgentFree, AgentBusy:
	default:
		return nil, fmt.Errorf("heartbeat from %s: %w: status %d is not free (1) or busy (2)", a.PodUID, ErrInvalid, a.Status)
	}
	return []any{a.PodUID, a.PodName, a.PodNamespace, a.PodIP, a.NodeName, a.NodeIP, a.HostNetwork,
		a.ResponderAddr, a.Version, int64(a.Status), s.d.ts(now)}, nil
}

func (s *sqlStore) UpsertHeartbeat(ctx context.Context, a Agent, now time.Time) (Agent, error) {
	args, err := s.heartbeatArgs(a, now)
	if err != nil {
		return Agent{}, err
	}
	got, err := scanAgent(s.w.QueryRowContext(ctx, upsertAgentSQL, args...))
	if err != nil {
		return Agent{}, fmt.Errorf("heartbeat from %s: %w", a.PodUID, err)
	}
	return got, nil
}

func (s *sqlStore) UpsertHeartbeats(ctx context.Context, agents []Agent, now time.Time) error {
	_, err := s.RegisterAgents(ctx, agents, now)
	return err
}

func (s *sqlStore) RegisterAgents(ctx context.Context, agents []Agent, now time.Time) ([]Agent, error) {
	if len(agents) == 0 {
		return nil, nil
	}
	all := make([][]any, len(agents))
	for i, a := range agents {
		args, err := s.heartbeatArgs(a, now)
		if err != nil {
			return nil, fmt.Errorf("heartbeat %d: %w", i, err)
		}
		all[i] = args
	}
	out := make([]Agent, len(agents))
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, upsertAgentSQL)
		if err != nil {
			return fmt.Errorf("prepare heartbeat: %w", err)
		}
		defer stmt.Close()
		for i, args := range all {
			if out[i], err = scanAgent(stmt.QueryRowContext(ctx, args...)); err != nil {
				return fmt.Errorf("heartbeat from %s: %w", agents[i].PodUID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// touchChunk bounds the pod UIDs of one TouchAgents statement.
const touchChunk = 500

func (s *sqlStore) TouchAgents(ctx context.Context, touches []Touch) (int, error) {
	if len(touches) == 0 {
		return 0, nil
	}
	type key struct {
		status AgentStatus
		at     int64
	}
	groups := map[key][]string{}
	var keys []key
	for i, t := range touches {
		if t.PodUID == "" {
			return 0, fmt.Errorf("touch %d: %w: pod_uid is empty", i, ErrInvalid)
		}
		if t.At.IsZero() {
			return 0, fmt.Errorf("touch %s: %w: no time", t.PodUID, ErrInvalid)
		}
		st := t.Status
		if st == 0 {
			st = AgentFree
		}
		if st != AgentFree && st != AgentBusy {
			return 0, fmt.Errorf("touch %s: %w: status %d is not free (1) or busy (2)", t.PodUID, ErrInvalid, t.Status)
		}
		k := key{st, t.At.UnixMicro()}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], t.PodUID)
	}
	total := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		total = 0
		for _, k := range keys {
			uids := groups[k]
			for len(uids) > 0 {
				n := min(len(uids), touchChunk)
				args := make([]any, 0, n+2)
				args = append(args, s.d.ts(time.UnixMicro(k.at)), int64(k.status))
				ph := make([]string, n)
				for i, u := range uids[:n] {
					args = append(args, u)
					ph[i] = "$" + strconv.Itoa(i+3)
				}
				// "+status": keep SQLite from scanning the status index
				// instead of looking the uids up.
				res, err := tx.ExecContext(ctx, "UPDATE agents SET last_heartbeat = $1, status = $2 WHERE pod_uid IN ("+strings.Join(ph, ", ")+") AND +status IN (1, 2)", args...)
				if err != nil {
					return fmt.Errorf("touch agents: %w", err)
				}
				if k, err := res.RowsAffected(); err == nil {
					total += int(k)
				}
				uids = uids[n:]
			}
		}
		return nil
	})
	return total, err
}

func (s *sqlStore) GetAgent(ctx context.Context, podUID string) (Agent, error) {
	a, err := scanAgent(s.r.QueryRowContext(ctx, "SELECT "+agentCols+" FROM agents WHERE pod_uid = $1", podUID))
	if errors.Is(err, sql.ErrNoRows) {
		return Agent{}, fmt.Errorf("agent %s: %w", podUID, ErrNotFound)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("get agent %s: %w", podUID, err)
	}
	return a, nil
}

func (s *sqlStore) ListAgents(ctx context.Context, f AgentFilter) ([]Agent, error) {
	var w where
	if !f.IncludeOffline {
		w.add("status IN (1, 2)")
	}
	if f.Node != "" {
		w.add("node_name = "+w.arg(f.Node), f.Node)
	}
	rows, err := s.r.QueryContext(ctx, "SELECT "+agentCols+" FROM agents"+w.sql()+" ORDER BY id", w.args...)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	out, err := collect(rows, scanAgent)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out, nil
}

func (s *sqlStore) MarkSilentOffline(ctx context.Context, silentSince, now time.Time) ([]Agent, error) {
	rows, err := s.w.QueryContext(ctx, "UPDATE agents SET status = 3 WHERE status IN (1, 2) AND last_heartbeat < $1 RETURNING "+agentCols,
		s.d.ts(silentSince))
	if err != nil {
		return nil, fmt.Errorf("mark silent agents offline: %w", err)
	}
	out, err := collect(rows, scanAgent)
	if err != nil {
		return nil, fmt.Errorf("mark silent agents offline: %w", err)
	}
	return out, nil
}

// where builds a WHERE clause with numbered placeholders.
type where struct {
	conds []string
	args  []any
}

// arg returns the placeholder the next added argument will get.
func (w *where) arg(any) string { return "$" + strconv.Itoa(len(w.args)+1) }

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

func normPage(p Page) (int, error) {
	if p.Limit < 0 {
		return 0, fmt.Errorf("%w: page limit %d is negative", ErrInvalid, p.Limit)
	}
	if p.AfterID < 0 {
		return 0, fmt.Errorf("%w: page after_id %d is negative", ErrInvalid, p.AfterID)
	}
	switch {
	case p.Limit == 0:
		return DefaultPageLimit, nil
	case p.Limit > MaxPageLimit:
		return MaxPageLimit, nil
	}
	return p.Limit, nil
}

// ---- runs ----

func (s *sqlStore) CreateRun(ctx context.Context, r Run, tasks []Task, now time.Time) (Run, []Task, error) {
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	if r.Suite == "" {
		return Run{}, nil, fmt.Errorf("create run: %w: suite is empty", ErrInvalid)
	}
	if len(r.Params) > 0 && !json.Valid(r.Params) {
		return Run{}, nil, fmt.Errorf("create run: %w: params is not valid JSON", ErrInvalid)
	}
	now = micro(now)
	r.State, r.CreatedAt, r.UpdatedAt, r.FinishedAt = RunRunning, now, now, nil
	var out []Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO runs (id, suite, params, state, allow_concurrency, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING seq`,
			r.ID, r.Suite, s.jsOrNil(r.Params), string(r.State), r.AllowConcurrency, s.d.ts(now)).Scan(&r.Seq)
		if err != nil {
			if s.d.isUnique(err) {
				return fmt.Errorf("create run %s: %w: the run ID exists", r.ID, ErrConflict)
			}
			return fmt.Errorf("create run %s: %w", r.ID, err)
		}
		out, err = s.insertTasks(ctx, tx, r.ID, tasks, now)
		return err
	})
	if err != nil {
		return Run{}, nil, err
	}
	r.Counts = map[TaskState]int{}
	if len(out) > 0 {
		r.Counts[TaskPending] = len(out)
	}
	return r, out, nil
}

func (s *sqlStore) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return s.withCounts(ctx, r)
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// withCounts returns r with its task counts.
func (s *sqlStore) withCounts(ctx context.Context, r Run) (Run, error) {
	runs := []Run{r}
	if err := s.fillCounts(ctx, s.r, runs); err != nil {
		return Run{}, err
	}
	return runs[0], nil
}

// fillCounts sets Counts on each run with one grouped query.
func (s *sqlStore) fillCounts(ctx context.Context, q querier, runs []Run) error {
	if len(runs) == 0 {
		return nil
	}
	idx := make(map[string]int, len(runs))
	ph := make([]string, len(runs))
	args := make([]any, len(runs))
	for i := range runs {
		runs[i].Counts = map[TaskState]int{}
		idx[runs[i].ID] = i
		ph[i] = "$" + strconv.Itoa(i+1)
		args[i] = runs[i].ID
	}
	rows, err := q.QueryContext(ctx, "SELECT run_id, state, COUNT(*) FROM tasks WHERE run_id IN ("+strings.Join(ph, ", ")+") GROUP BY run_id, state", args...)
	if err != nil {
		return fmt.Errorf("count run tasks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		var n int
		if err := rows.Scan(&id, &state, &n); err != nil {
			return fmt.Errorf("count run tasks: %w", err)
		}
		runs[idx[id]].Counts[TaskState(state)] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count run tasks: %w", err)
	}
	return nil
}

func (s *sqlStore) ListRuns(ctx context.Context, f RunFilter, p Page) ([]Run, int, error) {
	limit, err := normPage(p)
	if err != nil {
		return nil, 0, fmt.Errorf("list runs: %w", err)
	}
	var w where
	if f.State != "" {
		if !f.State.Valid() {
			return nil, 0, fmt.Errorf("list runs: %w: unknown run state %q", ErrInvalid, f.State)
		}
		w.add("state = "+w.arg(nil), string(f.State))
	}
	if f.Suite != "" {
		w.add("suite = "+w.arg(nil), f.Suite)
	}
	runs, total, err := listPage(ctx, s.r, "runs", runCols, "seq", w, p.AfterID, limit, scanRun)
	if err != nil {
		return nil, 0, err
	}
	if err := s.fillCounts(ctx, s.r, runs); err != nil {
		return nil, 0, err
	}
	return runs, total, nil
}

func (s *sqlStore) UpdateRunState(ctx context.Context, id string, state RunState, now time.Time) (Run, error) {
	if !state.Terminal() {
		return Run{}, fmt.Errorf("update run %s: %w: state %q is not a terminal run state", id, ErrInvalid, state)
	}
	var out Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = $1"+s.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update run %s: %w", id, err)
		}
		switch {
		case r.State == state:
			out = r
			return nil
		case r.State.Terminal():
			return fmt.Errorf("update run %s to %s: %w: run is already %s", id, state, ErrConflict, r.State)
		}
		out, err = scanRun(tx.QueryRowContext(ctx, "UPDATE runs SET state = $1, finished_at = $2, updated_at = $2 WHERE id = $3 RETURNING "+runCols,
			string(state), s.d.ts(now), id))
		if err != nil {
			return fmt.Errorf("update run %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return s.withCounts(ctx, out)
}

func (s *sqlStore) CancelRun(ctx context.Context, id, reason string, now time.Time) (Run, error) {
	if reason == "" {
		reason = ReasonCancelled
	}
	var out Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = $1"+s.d.forUpdate, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("cancel run %s: %w", id, err)
		}
		switch r.State {
		case RunCancelled:
			out = r
			return nil
		case RunSucceeded, RunFailed:
			return fmt.Errorf("cancel run %s: %w: run is already %s", id, ErrConflict, r.State)
		}
		ts := s.d.ts(now)
		if _, err := tx.ExecContext(ctx, "UPDATE tasks SET state = 'cancelled', reason = $1, finished_at = $2, updated_at = $2 WHERE run_id = $3 AND state IN "+openStates,
			reason, ts, id); err != nil {
			return fmt.Errorf("cancel tasks of run %s: %w", id, err)
		}
		out, err = scanRun(tx.QueryRowContext(ctx, "UPDATE runs SET state = 'cancelled', finished_at = $1, updated_at = $1 WHERE id = $2 RETURNING "+runCols, ts, id))
		if err != nil {
			return fmt.Errorf("cancel run %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return s.withCounts(ctx, out)
}

// finishRuns ends every running run among ids whose tasks are all terminal:
// succeeded if all succeeded, else failed.
func (s *sqlStore) finishRuns(ctx context.Context, tx *sql.Tx, tasks []Task, now time.Time) error {
	seen := map[string]bool{}
	var args []any
	var ph []string
	for _, t := range tasks {
		if t.RunID == "" || seen[t.RunID] {
			continue
		}
		seen[t.RunID] = true
		args = append(args, t.RunID)
		ph = append(ph, "$"+strconv.Itoa(len(args)+1))
	}
	if len(args) == 0 {
		return nil
	}
	args = append([]any{s.d.ts(now)}, args...)
	q := `UPDATE runs SET finished_at = $1, updated_at = $1,
	state = CASE WHEN EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.id AND t.state <> 'succeeded') THEN 'failed' ELSE 'succeeded' END
WHERE state = 'running' AND id IN (` + strings.Join(ph, ", ") + `)
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.id AND t.state IN ` + openStates + `)`
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("finish runs: %w", err)
	}
	return nil
}

// ---- tasks ----

func validateTask(i int, t Task) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("task %d: %w: %s", i, ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case t.SrcPodUID == "":
		return bad("src_pod_uid is empty")
	case t.DstPodUID == "":
		return bad("dst_pod_uid is empty")
	case t.Type == "":
		return bad("type is empty")
	case t.Timeout < 0:
		return bad("timeout %s is negative", t.Timeout)
	case len(t.Spec) > 0 && !json.Valid(t.Spec):
		return bad("spec is not valid JSON")
	case len(t.Result) > 0 && !json.Valid(t.Result):
		return bad("result is not valid JSON")
	}
	return nil
}

func (s *sqlStore) CreateTasks(ctx context.Context, runID string, tasks []Task, now time.Time) ([]Task, error) {
	var out []Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if runID != "" {
			var state string
			err := tx.QueryRowContext(ctx, "SELECT state FROM runs WHERE id = $1", runID).Scan(&state)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("create tasks: run %s: %w", runID, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("create tasks: run %s: %w", runID, err)
			}
			if RunState(state).Terminal() {
				return fmt.Errorf("create tasks: %w: run %s is already %s", ErrConflict, runID, state)
			}
		}
		var err error
		out, err = s.insertTasks(ctx, tx, runID, tasks, micro(now))
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *sqlStore) insertTasks(ctx context.Context, tx *sql.Tx, runID string, tasks []Task, now time.Time) ([]Task, error) {
	out := make([]Task, len(tasks))
	seen := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if err := validateTask(i, t); err != nil {
			return nil, err
		}
		if t.TaskID == "" {
			t.TaskID = uuid.NewString()
		}
		if j, dup := seen[t.TaskID]; dup {
			return nil, fmt.Errorf("task %d: %w: task_id %s repeats task %d", i, ErrConflict, t.TaskID, j)
		}
		seen[t.TaskID] = i
		t.RunID = runID
		t.State, t.Reason, t.RawResult, t.Result, t.ReportID = TaskPending, "", "", nil, ""
		t.Deadline, t.DispatchedAt, t.StartedAt, t.FinishedAt = nil, nil, nil, nil
		t.CreatedAt, t.UpdatedAt = now, now
		out[i] = t
	}
	if len(out) == 0 {
		return out, nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks (task_id, run_id, src_pod_uid, src_pod_ip, dst_pod_uid, dst_pod_ip,
	type, param, spec, state, exclusive, timeout_ns, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $12) RETURNING id`)
	if err != nil {
		return nil, fmt.Errorf("prepare task insert: %w", err)
	}
	defer stmt.Close()
	var run any
	if runID != "" {
		run = runID
	}
	ts := s.d.ts(now)
	for i := range out {
		t := &out[i]
		err := stmt.QueryRowContext(ctx, t.TaskID, run, t.SrcPodUID, t.SrcPodIP, t.DstPodUID, t.DstPodIP,
			t.Type, t.Param, s.jsOrNil(t.Spec), t.Exclusive, int64(t.Timeout), ts).Scan(&t.ID)
		if err != nil {
			if s.d.isUnique(err) {
				return nil, fmt.Errorf("task %d: %w: task_id %s exists", i, ErrConflict, t.TaskID)
			}
			return nil, fmt.Errorf("task %d: insert: %w", i, err)
		}
	}
	return out, nil
}

func (s *sqlStore) GetTask(ctx context.Context, taskID string) (Task, error) {
	t, err := scanTask(s.r.QueryRowContext(ctx, "SELECT "+taskCols+" FROM tasks WHERE task_id = $1", taskID))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("task %s: %w", taskID, ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("get task %s: %w", taskID, err)
	}
	return t, nil
}

func (s *sqlStore) ListTasks(ctx context.Context, f TaskFilter, p Page) ([]Task, int, error) {
	limit, err := normPage(p)
	if err != nil {
		return nil, 0, fmt.Errorf("list tasks: %w", err)
	}
	var w where
	if f.RunID != "" {
		w.add("run_id = "+w.arg(nil), f.RunID)
	}
	if f.State != "" {
		if !f.State.Valid() {
			return nil, 0, fmt.Errorf("list tasks: %w: unknown task state %q", ErrInvalid, f.State)
		}
		w.add("state = "+w.arg(nil), string(f.State))
	}
	if f.AgentUID != "" {
		ph := w.arg(nil)
		w.add("(src_pod_uid = "+ph+" OR dst_pod_uid = "+ph+")", f.AgentUID)
	}
	if f.Type != "" {
		w.add("type = "+w.arg(nil), f.Type)
	}
	return listPage(ctx, s.r, "tasks", taskCols, "id", w, p.AfterID, limit, scanTask)
}

// listPage counts the rows of table that match w, then reads cols of the
// page of at most limit rows whose key is above afterID, in key order.
func listPage[T any](ctx context.Context, q querier, table, cols, key string, w where, afterID int64, limit int, scan func(rowScanner) (T, error)) ([]T, int, error) {
	var total int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+w.sql(), w.args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count %s: %w", table, err)
	}
	w.add(key+" > "+w.arg(nil), afterID)
	args := append(w.args, limit)
	rows, err := q.QueryContext(ctx, "SELECT "+cols+" FROM "+table+w.sql()+" ORDER BY "+key+" LIMIT $"+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", table, err)
	}
	page, err := collect(rows, scan)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", table, err)
	}
	return page, total, nil
}

// claimCandidate is a pending task with what the exclusive rule needs.
type claimCandidate struct {
	id        int64
	timeout   time.Duration
	exclusive bool     // exclusive and its run does not allow concurrency
	nodes     []string // node keys of its endpoints
}

// nodeKey names the node an endpoint is on; an endpoint with no known node
// is its own node.
func nodeKey(node sql.NullString, podUID string) string {
	if node.Valid && node.String != "" {
		return "node:" + node.String
	}
	return "pod:" + podUID
}

// maxClaimScan bounds how many pending tasks one claim examines.
const maxClaimScan = 1000

func (s *sqlStore) ClaimTasks(ctx context.Context, agentUID string, now time.Time, limit int, grace time.Duration) ([]Task, error) {
	if agentUID == "" {
		return nil, fmt.Errorf("claim tasks: %w: agent pod_uid is empty", ErrInvalid)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("claim tasks for %s: %w: limit %d is not positive", agentUID, ErrInvalid, limit)
	}
	if grace < 0 {
		return nil, fmt.Errorf("claim tasks for %s: %w: grace %s is negative", agentUID, ErrInvalid, grace)
	}
	// Cheap read first: most polls find nothing and need no write lock.
	var pending int
	err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE src_pod_uid = $1 AND state = 'pending' LIMIT 1) p", agentUID).Scan(&pending)
	if err != nil {
		return nil, fmt.Errorf("claim tasks for %s: %w", agentUID, err)
	}
	if pending == 0 {
		return []Task{}, nil
	}
	now = micro(now)
	out := []Task{}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if s.d.lockClaims != nil {
			if err := s.d.lockClaims(ctx, tx); err != nil {
				return fmt.Errorf("lock claims: %w", err)
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT t.id, t.timeout_ns, t.exclusive AND NOT COALESCE(r.allow_concurrency, FALSE),
	sa.node_name, t.src_pod_uid, da.node_name, t.dst_pod_uid
FROM tasks t
JOIN agents da ON da.pod_uid = t.dst_pod_uid AND da.status IN (1, 2)
LEFT JOIN agents sa ON sa.pod_uid = t.src_pod_uid
LEFT JOIN runs r ON r.id = t.run_id
WHERE t.src_pod_uid = $1 AND t.state = 'pending'
ORDER BY t.id LIMIT $2`, agentUID, maxClaimScan)
		if err != nil {
			return fmt.Errorf("find pending tasks: %w", err)
		}
		var cands []claimCandidate
		anyExclusive := false
		for rows.Next() {
			var c claimCandidate
			var timeout int64
			var srcNode, dstNode sql.NullString
			var src, dst string
			if err := rows.Scan(&c.id, &timeout, &c.exclusive, &srcNode, &src, &dstNode, &dst); err != nil {
				rows.Close()
				return fmt.Errorf("find pending tasks: %w", err)
			}
			c.timeout = time.Duration(timeout)
			c.nodes = []string{nodeKey(srcNode, src), nodeKey(dstNode, dst)}
			anyExclusive = anyExclusive || c.exclusive
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find pending tasks: %w", err)
		}
		busy := map[string]bool{}
		if anyExclusive {
			if busy, err = s.busyNodes(ctx, tx); err != nil {
				return err
			}
		}
		for _, c := range cands {
			if len(out) >= limit {
				break
			}
			if c.exclusive && (busy[c.nodes[0]] || busy[c.nodes[1]]) {
				continue
			}
			deadline := now.Add(c.timeout + grace)
			t, err := scanTask(tx.QueryRowContext(ctx, `UPDATE tasks SET state = 'dispatched', dispatched_at = $1, updated_at = $1, deadline = $2
WHERE id = $3 AND state = 'pending' RETURNING `+taskCols, s.d.ts(now), s.d.ts(deadline), c.id))
			if errors.Is(err, sql.ErrNoRows) {
				continue // cancelled meanwhile
			}
			if err != nil {
				return fmt.Errorf("dispatch task %d: %w", c.id, err)
			}
			if c.exclusive {
				busy[c.nodes[0]], busy[c.nodes[1]] = true, true
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks for %s: %w", agentUID, err)
	}
	return out, nil
}

// busyNodes returns the node keys of every endpoint of an exclusive
// (non-concurrent) task that is dispatched or running.
func (s *sqlStore) busyNodes(ctx context.Context, tx *sql.Tx) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT sa.node_name, t.src_pod_uid, da.node_name, t.dst_pod_uid
FROM tasks t
LEFT JOIN agents sa ON sa.pod_uid = t.src_pod_uid
LEFT JOIN agents da ON da.pod_uid = t.dst_pod_uid
LEFT JOIN runs r ON r.id = t.run_id
WHERE t.state IN `+activeStates+` AND t.exclusive AND NOT COALESCE(r.allow_concurrency, FALSE)`)
	if err != nil {
		return nil, fmt.Errorf("find busy nodes: %w", err)
	}
	defer rows.Close()
	busy := map[string]bool{}
	for rows.Next() {
		var srcNode, dstNode sql.NullString
		var src, dst string
		if err := rows.Scan(&srcNode, &src, &dstNode, &dst); err != nil {
			return nil, fmt.Errorf("find busy nodes: %w", err)
		}
		busy[nodeKey(srcNode, src)], busy[nodeKey(dstNode, dst)] = true, true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find busy nodes: %w", err)
	}
	return busy, nil
}

// lockTask reads a task for change inside tx.
func (s *sqlStore) lockTask(ctx context.Context, tx *sql.Tx, taskID string) (Task, error) {
	t, err := scanTask(tx.QueryRowContext(ctx, "SELECT "+taskCols+" FROM tasks WHERE task_id = $1"+s.d.forUpdate, taskID))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("task %s: %w", taskID, ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("read task %s: %w", taskID, err)
	}
	return t, nil
}

func (s *sqlStore) MarkRunning(ctx context.Context, taskID, agentUID string, now time.Time) (Task, error) {
	var out Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockTask(ctx, tx, taskID)
		if err != nil {
			return err
		}
		switch {
		case t.SrcPodUID != agentUID:
			return fmt.Errorf("task %s of agent %s: %w", taskID, agentUID, ErrNotFound)
		case t.State == TaskRunning:
			out = t
			return nil
		case t.State != TaskDispatched:
			return fmt.Errorf("mark task %s running: %w: task is %s", taskID, ErrConflict, t.State)
		}
		out, err = scanTask(tx.QueryRowContext(ctx, "UPDATE tasks SET state = 'running', started_at = $1, updated_at = $1 WHERE id = $2 RETURNING "+taskCols,
			s.d.ts(now), t.ID))
		if err != nil {
			return fmt.Errorf("mark task %s running: %w", taskID, err)
		}
		return nil
	})
	return out, err
}

func (s *sqlStore) Complete(ctx context.Context, r Report, now time.Time) (Task, bool, error) {
	switch {
	case r.ReportID == "":
		return Task{}, false, fmt.Errorf("report for task %s: %w: report_id is empty", r.TaskID, ErrInvalid)
	case !r.State.Terminal():
		return Task{}, false, fmt.Errorf("report for task %s: %w: state %q is not terminal", r.TaskID, ErrInvalid, r.State)
	case len(r.Result) > 0 && !json.Valid(r.Result):
		return Task{}, false, fmt.Errorf("report for task %s: %w: result is not valid JSON", r.TaskID, ErrInvalid)
	}
	var out Task
	dup := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockTask(ctx, tx, r.TaskID)
		if err != nil {
			return err
		}
		switch {
		case t.SrcPodUID != r.AgentUID:
			return fmt.Errorf("task %s of agent %s: %w", r.TaskID, r.AgentUID, ErrNotFound)
		case t.ReportID == r.ReportID:
			out, dup = t, true
			return nil
		case t.State.Terminal():
			return fmt.Errorf("report %s for task %s: %w: task already %s", r.ReportID, r.TaskID, ErrConflict, t.State)
		case t.State == TaskPending:
			return fmt.Errorf("report %s for task %s: %w: task was never dispatched", r.ReportID, r.TaskID, ErrConflict)
		}
		out, err = scanTask(tx.QueryRowContext(ctx, `UPDATE tasks SET state = $1, reason = $2, raw_result = $3, result = $4,
	report_id = $5, finished_at = $6, updated_at = $6 WHERE id = $7 RETURNING `+taskCols,
			string(r.State), r.Reason, r.RawResult, s.jsOrNil(r.Result), r.ReportID, s.d.ts(now), t.ID))
		if err != nil {
			return fmt.Errorf("complete task %s: %w", r.TaskID, err)
		}
		return s.finishRuns(ctx, tx, []Task{out}, now)
	})
	if err != nil {
		return Task{}, false, err
	}
	return out, dup, nil
}

func (s *sqlStore) Cancel(ctx context.Context, taskID, reason string, now time.Time) (Task, error) {
	if reason == "" {
		reason = ReasonCancelled
	}
	var out Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockTask(ctx, tx, taskID)
		if err != nil {
			return err
		}
		switch t.State {
		case TaskCancelled:
			out = t
			return nil
		case TaskSucceeded, TaskFailed, TaskTimedOut:
			return fmt.Errorf("cancel task %s: %w: task already %s", taskID, ErrConflict, t.State)
		}
		out, err = scanTask(tx.QueryRowContext(ctx, "UPDATE tasks SET state = 'cancelled', reason = $1, finished_at = $2, updated_at = $2 WHERE id = $3 RETURNING "+taskCols,
			reason, s.d.ts(now), t.ID))
		if err != nil {
			return fmt.Errorf("cancel task %s: %w", taskID, err)
		}
		return s.finishRuns(ctx, tx, []Task{out}, now)
	})
	return out, err
}

// endActive moves the active tasks matching cond (with args from $3 on) to
// state with reason, and finishes their runs, in one transaction.
func (s *sqlStore) endActive(ctx context.Context, state TaskState, reason, cond string, now time.Time, args ...any) ([]Task, error) {
	var out []Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		all := append([]any{string(state), reason, s.d.ts(now)}, args...)
		rows, err := tx.QueryContext(ctx, "UPDATE tasks SET state = $1, reason = $2, finished_at = $3, updated_at = $3 WHERE state IN "+activeStates+" AND "+cond+" RETURNING "+taskCols, all...)
		if err != nil {
			return err
		}
		if out, err = collect(rows, scanTask); err != nil {
			return err
		}
		return s.finishRuns(ctx, tx, out, now)
	})
	if out == nil && err == nil {
		out = []Task{}
	}
	return out, err
}

func (s *sqlStore) FailAgentTasks(ctx context.Context, agentUID, reason string, now time.Time) ([]Task, error) {
	if reason == "" {
		reason = ReasonAgentOffline
	}
	out, err := s.endActive(ctx, TaskFailed, reason, "src_pod_uid = $4", now, agentUID)
	if err != nil {
		return nil, fmt.Errorf("fail tasks of agent %s: %w", agentUID, err)
	}
	return out, nil
}

func (s *sqlStore) ExpireDeadlines(ctx context.Context, now time.Time) ([]Task, error) {
	out, err := s.endActive(ctx, TaskTimedOut, ReasonDeadlinePassed, "deadline < $4", now, s.d.ts(now))
	if err != nil {
		return nil, fmt.Errorf("expire deadlines: %w", err)
	}
	return out, nil
}

func (s *sqlStore) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

func (s *sqlStore) Close() error {
	err := s.w.Close()
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return err
}
