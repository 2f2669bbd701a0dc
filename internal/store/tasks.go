package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

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
			err := tx.QueryRowContext(ctx, s.d.rebind("SELECT state FROM runs WHERE id = ?"), runID).Scan(&state)
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

// newTasks checks tasks and returns them as they are inserted into run
// runID (ids, state and times set), their indexes by task id, and the
// task ids the caller chose (which may exist).
func newTasks(runID string, tasks []Task, now time.Time) (out []Task, seen map[string]int, given []string, err error) {
	out = make([]Task, len(tasks))
	seen = make(map[string]int, len(tasks))
	for i, t := range tasks {
		if err := validateTask(i, t); err != nil {
			return nil, nil, nil, err
		}
		if t.TaskID == "" {
			t.TaskID = uuid.NewString()
		} else {
			given = append(given, t.TaskID)
		}
		if j, dup := seen[t.TaskID]; dup {
			return nil, nil, nil, fmt.Errorf("task %d: %w: task_id %s repeats task %d", i, ErrConflict, t.TaskID, j)
		}
		seen[t.TaskID] = i
		t.RunID = runID
		t.State, t.Reason, t.RawSize, t.Result, t.ReportID, t.LateReason = TaskPending, "", 0, nil, "", ""
		t.Deadline, t.DispatchedAt, t.StartedAt, t.FinishedAt = nil, nil, nil, nil
		t.CreatedAt, t.UpdatedAt = now, now
		out[i] = t
	}
	return out, seen, given, nil
}

// taskInsert is the INSERT of chunk ("?" placeholders, unbound) and its
// arguments.
func (s *sqlStore) taskInsert(chunk []Task, runID string, now time.Time) (string, []any) {
	var run any
	if runID != "" {
		run = runID
	}
	ts := s.d.timeArg(now)
	const row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	args := make([]any, 0, 16*len(chunk))
	for _, t := range chunk {
		// State, DispatchedAt and Deadline are newTasks' (pending, none)
		// unless the task was claimed at its creation (dispatchAtCreate).
		args = append(args, t.TaskID, run, t.SrcPodUID, t.SrcPodIP, t.DstPodUID, t.DstPodIP,
			t.Type, t.Param, s.jsOrNil(t.Spec), string(t.State), t.Exclusive, int64(t.Timeout), ts, ts,
			s.timeOrNil(t.DispatchedAt), s.timeOrNil(t.Deadline))
	}
	return `INSERT INTO tasks (task_id, run_id, src_pod_uid, src_pod_ip, dst_pod_uid, dst_pod_ip,
	type, param, spec, state, exclusive, timeout_ns, created_at, updated_at, dispatched_at, deadline)
VALUES ` + strings.TrimSuffix(strings.Repeat(row+", ", len(chunk)), ", "), args
}

func (s *sqlStore) insertTasks(ctx context.Context, tx *sql.Tx, runID string, tasks []Task, now time.Time) ([]Task, error) {
	out, seen, given, err := newTasks(runID, tasks, now)
	if err != nil {
		return nil, err
	}
	return s.insertNewTasks(ctx, tx, runID, out, seen, given, now)
}

// insertNewTasks inserts the tasks newTasks made of a run's (out, seen,
// given).
func (s *sqlStore) insertNewTasks(ctx context.Context, tx *sql.Tx, runID string, out []Task, seen map[string]int, given []string, now time.Time) ([]Task, error) {
	var err error
	if len(out) == 0 {
		return out, nil
	}
	// A task id the caller chose that exists is named by its index (a
	// failed insert of many rows would not say which).
	for chunk := range slices.Chunk(given, batchRows) {
		existing, err := s.taskIDs(ctx, tx, chunk)
		if err != nil {
			return nil, err
		}
		if len(existing) > 0 {
			first := slices.MinFunc(slices.Collect(maps.Keys(existing)), func(a, b string) int { return seen[a] - seen[b] })
			return nil, fmt.Errorf("task %d: %w: task_id %s exists", seen[first], ErrConflict, first)
		}
	}
	// A few hundred rows a statement, their keys returned by it (or,
	// without RETURNING, read back by task id): one round trip for a
	// run's tasks, not one per task (the create call is on every task's
	// dispatch latency).
	for start := 0; start < len(out); start += batchRows {
		chunk := out[start:min(start+batchRows, len(out))]
		ids := make([]string, len(chunk))
		for i := range chunk {
			ids[i] = chunk[i].TaskID
		}
		query, args := s.taskInsert(chunk, runID, now)
		insert := s.d.rebind(query)
		var keys map[string]int64
		if s.d.returning() {
			keys, err = readKeys(tx.QueryContext(ctx, insert+" RETURNING id, task_id", args...))
		} else if _, err = tx.ExecContext(ctx, insert, args...); err == nil {
			keys, err = s.taskIDs(ctx, tx, ids)
		}
		if err != nil {
			if s.d.isUnique(err) {
				return nil, fmt.Errorf("tasks %d-%d: %w: a task_id exists", start, start+len(chunk)-1, ErrConflict)
			}
			return nil, fmt.Errorf("tasks %d-%d: insert: %w", start, start+len(chunk)-1, err)
		}
		for i := range chunk {
			k, ok := keys[chunk[i].TaskID]
			if !ok {
				return nil, fmt.Errorf("task %d: inserted, but its row is not found", start+i)
			}
			chunk[i].ID = k
		}
	}
	return out, nil
}

// taskIDs returns the keys of the tasks with these task ids that exist.
func (s *sqlStore) taskIDs(ctx context.Context, tx *sql.Tx, taskIDs []string) (map[string]int64, error) {
	args := make([]any, len(taskIDs))
	for i, id := range taskIDs {
		args[i] = id
	}
	keys, err := readKeys(tx.QueryContext(ctx, s.d.rebind("SELECT id, task_id FROM tasks WHERE task_id IN ("+placeholders(len(taskIDs))+")"), args...))
	if err != nil {
		return nil, fmt.Errorf("read task keys: %w", err)
	}
	return keys, nil
}

// readKeys reads rows of (id, task_id) into a map by task id.
func readKeys(rows *sql.Rows, err error) (map[string]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id int64
		var taskID string
		if err := rows.Scan(&id, &taskID); err != nil {
			return nil, err
		}
		out[taskID] = id
	}
	return out, rows.Err()
}

func (s *sqlStore) TaskOutput(ctx context.Context, taskID string) (string, error) {
	var raw sql.NullString
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT o.raw FROM tasks t LEFT JOIN task_outputs o ON o.task_id = t.task_id WHERE t.task_id = ?`), taskID).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("task %s: %w", taskID, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("read output of task %s: %w", taskID, err)
	}
	return raw.String, nil
}

func (s *sqlStore) TaskOutputChunk(ctx context.Context, taskID string, off, n int64) (string, error) {
	if off < 0 || n <= 0 {
		return "", fmt.Errorf("read output of task %s: %w: chunk at %d of %d characters", taskID, ErrInvalid, off, n)
	}
	// SUBSTR counts characters (not bytes) in every dialect: a chunk never
	// splits a character, and the chunks joined are the output.
	var part string
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT SUBSTR(raw, ?, ?) FROM task_outputs WHERE task_id = ?`), off+1, n, taskID).Scan(&part)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read output of task %s at %d: %w", taskID, off, err)
	}
	return part, nil
}

func (s *sqlStore) GetTask(ctx context.Context, taskID string) (Task, error) {
	t, err := scanTask(s.r.QueryRowContext(ctx, s.d.rebind("SELECT "+taskCols+" FROM tasks WHERE task_id = ?"), taskID))
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
		w.add("run_id = ?", f.RunID)
	}
	if f.State != "" {
		if !f.State.Valid() {
			return nil, 0, fmt.Errorf("list tasks: %w: unknown task state %q", ErrInvalid, f.State)
		}
		w.add("state = ?", string(f.State))
	}
	if f.AgentUID != "" {
		w.add("(src_pod_uid = ? OR dst_pod_uid = ?)", f.AgentUID, f.AgentUID)
	}
	if f.Type != "" {
		w.add("type = ?", f.Type)
	}
	if !f.DispatchedAfter.IsZero() {
		w.add("dispatched_at >= ?", s.d.timeArg(micro(f.DispatchedAfter)))
	}
	if !f.DispatchedBefore.IsZero() {
		w.add("dispatched_at < ?", s.d.timeArg(micro(f.DispatchedBefore)))
	}
	return listPage(ctx, s, "tasks", taskCols, "id", w, p.AfterID, limit, scanTask)
}

// lockTask reads a task for change inside tx.
func (s *sqlStore) lockTask(ctx context.Context, tx *sql.Tx, taskID string) (Task, error) {
	t, err := scanTask(tx.QueryRowContext(ctx, s.d.rebind("SELECT "+taskCols+" FROM tasks WHERE task_id = ?"+s.d.forUpdate()), taskID))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("task %s: %w", taskID, ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("read task %s: %w", taskID, err)
	}
	return t, nil
}

// taskUpdate sets a task's columns (set, with setArgs) by its serial id.
func taskUpdate(id int64, set string, setArgs ...any) update {
	return update{table: "tasks", key: "id", cols: taskCols, set: set, setArgs: setArgs, where: "id = ?", whereArgs: []any{id}}
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
		ts := s.d.timeArg(now)
		out, err = updateOne(ctx, s, tx, taskUpdate(t.ID, "state = 'cancelled', reason = ?, finished_at = ?, updated_at = ?", reason, ts, ts), scanTask)
		if err != nil {
			return fmt.Errorf("cancel task %s: %w", taskID, err)
		}
		return s.finishRuns(ctx, tx, []Task{out}, now)
	})
	if err != nil {
		return out, err
	}
	return out, s.settleRuns(ctx, []Task{out}, now)
}

// endActive moves the active tasks matching cond (with its args) to state
// with reason, and finishes their runs, in one transaction.
func (s *sqlStore) endActive(ctx context.Context, state TaskState, reason, cond string, now time.Time, args ...any) ([]Task, error) {
	return s.endTasks(ctx, activeStates, state, reason, cond, now, args...)
}

// endTasks moves the tasks in one of the states from (an SQL list) that
// match cond (with its args) to state with reason, and finishes their
// runs, in one transaction.
func (s *sqlStore) endTasks(ctx context.Context, from string, state TaskState, reason, cond string, now time.Time, args ...any) ([]Task, error) {
	var out []Task
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ts := s.d.timeArg(now)
		var err error
		out, err = updateReturning(ctx, s, tx, update{table: "tasks", key: "id", cols: taskCols,
			set: "state = ?, reason = ?, finished_at = ?, updated_at = ?", setArgs: []any{string(state), reason, ts, ts},
			where: "state IN " + from + " AND " + cond, whereArgs: args,
		}, scanTask)
		if err != nil {
			return err
		}
		return s.finishRuns(ctx, tx, out, now)
	})
	if err == nil {
		err = s.settleRuns(ctx, out, now)
	}
	if out == nil && err == nil {
		out = []Task{}
	}
	return out, err
}

func (s *sqlStore) FailAgentTasks(ctx context.Context, agentUID, reason string, now time.Time) ([]Task, error) {
	if reason == "" {
		reason = ReasonAgentOffline
	}
	out, err := s.endActive(ctx, TaskFailed, reason, "src_pod_uid = ?", now, agentUID)
	if err != nil {
		return nil, fmt.Errorf("fail tasks of agent %s: %w", agentUID, err)
	}
	return out, nil
}

func (s *sqlStore) ExpireDeadlines(ctx context.Context, now time.Time) ([]Task, error) {
	out, err := s.endActive(ctx, TaskTimedOut, ReasonDeadlinePassed, "deadline < ?", now, s.d.timeArg(now))
	if err != nil {
		return nil, fmt.Errorf("expire deadlines: %w", err)
	}
	return out, nil
}

// ReasonAgentGone is the reason FailGoneAgentTasks gives a pending task:
// which endpoint agent is gone and since when.
func ReasonAgentGone(podUID string, since time.Time) string {
	return fmt.Sprintf("agent %s offline since %s", podUID, since.UTC().Format(time.RFC3339))
}

func (s *sqlStore) FailGoneAgentTasks(ctx context.Context, goneBefore, now time.Time) ([]Task, error) {
	// The gone agents that pending tasks wait for: two index probes per
	// offline agent.
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT a.pod_uid, a.last_heartbeat FROM agents a
WHERE a.status = 3 AND a.last_heartbeat < ?
	AND (EXISTS (SELECT 1 FROM tasks t WHERE t.src_pod_uid = a.pod_uid AND t.state = 'pending')
		OR EXISTS (SELECT 1 FROM tasks t WHERE t.dst_pod_uid = a.pod_uid AND t.state = 'pending'))
ORDER BY a.id`), s.d.timeArg(goneBefore))
	if err != nil {
		return nil, fmt.Errorf("find gone agents: %w", err)
	}
	type gone struct {
		uid   string
		since tsScan
	}
	var gs []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.uid, &g.since); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find gone agents: %w", err)
		}
		gs = append(gs, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find gone agents: %w", err)
	}
	out := []Task{}
	for _, g := range gs {
		// The agent is looked at again in the update: one that came back
		// since (a heartbeat makes it online) keeps its tasks.
		ts, err := s.endTasks(ctx, "('pending')", TaskFailed, ReasonAgentGone(g.uid, g.since.t),
			"(src_pod_uid = ? OR dst_pod_uid = ?) AND EXISTS (SELECT 1 FROM agents a WHERE a.pod_uid = ? AND a.status = 3 AND a.last_heartbeat < ?)",
			now, g.uid, g.uid, g.uid, s.d.timeArg(goneBefore))
		if err != nil {
			return out, fmt.Errorf("fail pending tasks of gone agent %s: %w", g.uid, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}
