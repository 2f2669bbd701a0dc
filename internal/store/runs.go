package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

func (s *sqlStore) CreateRun(ctx context.Context, r Run, tasks []Task, now time.Time) (Run, []Task, error) {
	return s.createRun(ctx, r, tasks, now, nil)
}

func (s *sqlStore) CreateRunAndClaim(ctx context.Context, r Run, tasks []Task, now time.Time, c CreateClaim) (Run, []Task, error) {
	if err := checkClaim(c.Limit, c.Grace); err != nil {
		return Run{}, nil, fmt.Errorf("create run: %w", err)
	}
	return s.createRun(ctx, r, tasks, now, &c)
}

// createRun is CreateRun and, with claim set, CreateRunAndClaim.
func (s *sqlStore) createRun(ctx context.Context, r Run, tasks []Task, now time.Time, claim *CreateClaim) (Run, []Task, error) {
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
	out, seen, given, err := newTasks(r.ID, tasks, now)
	if err != nil {
		return Run{}, nil, err
	}
	atOnce := s.d.insertsInWith() && len(out) > 0 && len(out) <= batchRows && len(given) == 0
	if claim == nil && atOnce {
		// One statement: one round trip, where a transaction of the
		// run's INSERT and its tasks' takes four (BEGIN, COMMIT), on
		// every task's dispatch latency.
		if err := s.insertRunAtOnce(ctx, s.w, &r, out); err != nil {
			return Run{}, nil, err
		}
	} else {
		// A claim at creation is on every task's dispatch latency: it
		// goes on the creation lane (lane.go).
		inTx := s.inTx
		if claim != nil {
			inTx = s.inHotTx
		}
		err = inTx(ctx, func(tx *sql.Tx) error {
			var heldBy map[string]string
			if claim != nil {
				var err error
				if heldBy, err = s.dispatchAtCreate(ctx, tx, out, r.AllowConcurrency, now, *claim); err != nil {
					return err
				}
			}
			if atOnce {
				if err := s.insertRunAtOnce(ctx, tx, &r, out); err != nil {
					return err
				}
				return s.notifyClaimed(ctx, tx, claim, out, heldBy)
			}
			insert := s.insertKeySQL(`INSERT INTO runs (id, suite, params, state, allow_concurrency, created_at, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?)`, "seq")
			ts := s.d.timeArg(now)
			var err error
			r.Seq, err = s.newKey(ctx, bound{tx, insert}, r.ID, r.Suite, s.jsOrNil(r.Params), string(r.State), r.AllowConcurrency, ts, ts)
			if err != nil {
				if s.d.isUnique(err) {
					return fmt.Errorf("create run %s: %w: the run ID exists", r.ID, ErrConflict)
				}
				return fmt.Errorf("create run %s: %w", r.ID, err)
			}
			if out, err = s.insertNewTasks(ctx, tx, r.ID, out, seen, given, now); err != nil {
				return err
			}
			return s.notifyClaimed(ctx, tx, claim, out, heldBy)
		})
		if err != nil {
			return Run{}, nil, err
		}
	}
	r.Counts = map[TaskState]int{}
	for _, t := range out {
		r.Counts[t.State]++
	}
	return r, out, nil
}

// notifyClaimed sends, inside a run's creating transaction, the notices
// the claim's Notify makes of the tasks it dispatched.
func (s *sqlStore) notifyClaimed(ctx context.Context, tx *sql.Tx, claim *CreateClaim, out []Task, heldBy map[string]string) error {
	if claim == nil || claim.Notify == nil || len(heldBy) == 0 {
		return nil
	}
	var claimed []Task
	for _, t := range out {
		if t.State == TaskDispatched {
			claimed = append(claimed, t)
		}
	}
	return s.d.notify(ctx, tx, claim.Notify(claimed, heldBy))
}

// insertRunAtOnce inserts run r and its tasks, checked and with fresh
// task ids (newTasks), in one statement, and sets their keys.
func (s *sqlStore) insertRunAtOnce(ctx context.Context, q querier, r *Run, out []Task) error {
	ts := s.d.timeArg(r.CreatedAt)
	tasks, targs := s.taskInsert(out, r.ID, r.CreatedAt)
	args := append([]any{r.ID, r.Suite, s.jsOrNil(r.Params), string(r.State), r.AllowConcurrency, ts, ts}, targs...)
	rows, err := q.QueryContext(ctx, s.d.rebind(`WITH r AS (INSERT INTO runs (id, suite, params, state, allow_concurrency, created_at, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq),
t AS (`+tasks+` RETURNING id, task_id)
SELECT r.seq, t.id, t.task_id FROM r, t`), args...)
	if err == nil {
		defer rows.Close()
	}
	keys := map[string]int64{}
	for err == nil && rows.Next() {
		var id int64
		var taskID string
		err = rows.Scan(&r.Seq, &id, &taskID)
		keys[taskID] = id
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		if s.d.isUnique(err) {
			return fmt.Errorf("create run %s: %w: the run ID exists", r.ID, ErrConflict)
		}
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	for i := range out {
		k, ok := keys[out[i].TaskID]
		if !ok {
			return fmt.Errorf("create run %s: task %d: inserted, but its row is not found", r.ID, i)
		}
		out[i].ID = k
	}
	return nil
}

func (s *sqlStore) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, s.d.rebind("SELECT "+runCols+" FROM runs WHERE id = ?"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return s.withCounts(ctx, r)
}

// withCounts returns r with its task counts.
func (s *sqlStore) withCounts(ctx context.Context, r Run) (Run, error) {
	runs := []Run{r}
	if err := s.fillCounts(ctx, runs); err != nil {
		return Run{}, err
	}
	return runs[0], nil
}

// fillCounts sets Counts on each run with one grouped query.
func (s *sqlStore) fillCounts(ctx context.Context, runs []Run) error {
	if len(runs) == 0 {
		return nil
	}
	idx := make(map[string]int, len(runs))
	ids := make([]string, len(runs))
	for i := range runs {
		runs[i].Counts = map[TaskState]int{}
		idx[runs[i].ID] = i
		ids[i] = runs[i].ID
	}
	in, args := inList(ids)
	rows, err := s.r.QueryContext(ctx, s.d.rebind("SELECT run_id, state, COUNT(*) FROM tasks WHERE run_id IN "+in+" GROUP BY run_id, state"), args...)
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
	w, err := s.runWhere(f)
	if err != nil {
		return nil, 0, fmt.Errorf("list runs: %w", err)
	}
	runs, total, err := listPage(ctx, s, "runs", runCols, "seq", w, p.AfterID, limit, scanRun)
	if err != nil {
		return nil, 0, err
	}
	if err := s.fillCounts(ctx, runs); err != nil {
		return nil, 0, err
	}
	return runs, total, nil
}

func (s *sqlStore) CountRuns(ctx context.Context, f RunFilter) (int, error) {
	w, err := s.runWhere(f)
	if err != nil {
		return 0, fmt.Errorf("count runs: %w", err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, s.d.rebind("SELECT COUNT(*) FROM runs"+w.sql()), w.args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count runs: %w", err)
	}
	return n, nil
}

// runWhere is the condition of f.
func (s *sqlStore) runWhere(f RunFilter) (where, error) {
	var w where
	if f.State != "" {
		if !f.State.Valid() {
			return w, fmt.Errorf("%w: unknown run state %q", ErrInvalid, f.State)
		}
		w.add("state = ?", string(f.State))
	}
	if f.Suite != "" {
		w.add("suite = ?", f.Suite)
	}
	if !f.CreatedSince.IsZero() {
		w.add("created_at >= ?", s.d.timeArg(micro(f.CreatedSince)))
	}
	return w, nil
}

// lockRun reads a run for change inside tx; what names the operation in
// errors.
func (s *sqlStore) lockRun(ctx context.Context, tx *sql.Tx, id, what string) (Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, s.d.rebind("SELECT "+runCols+" FROM runs WHERE id = ?"+s.d.forUpdate()), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("%s run %s: %w", what, id, err)
	}
	return r, nil
}

// runUpdate sets a run's columns (set, with setArgs) by its id.
func runUpdate(id, set string, setArgs ...any) update {
	return update{table: "runs", key: "seq", cols: runCols, set: set, setArgs: setArgs, where: "id = ?", whereArgs: []any{id}}
}

func (s *sqlStore) UpdateRunState(ctx context.Context, id string, state RunState, now time.Time) (Run, error) {
	if !state.Terminal() {
		return Run{}, fmt.Errorf("update run %s: %w: state %q is not a terminal run state", id, ErrInvalid, state)
	}
	var out Run
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := s.lockRun(ctx, tx, id, "update")
		if err != nil {
			return err
		}
		switch {
		case r.State == state:
			out = r
			return nil
		case r.State.Terminal():
			return fmt.Errorf("update run %s to %s: %w: run is already %s", id, state, ErrConflict, r.State)
		}
		ts := s.d.timeArg(now)
		out, err = updateOne(ctx, s, tx, runUpdate(id, "state = ?, finished_at = ?, updated_at = ?", string(state), ts, ts), scanRun)
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
		r, err := s.lockRun(ctx, tx, id, "cancel")
		if err != nil {
			return err
		}
		switch r.State {
		case RunCancelled:
			out = r
			return nil
		case RunSucceeded, RunFailed:
			return fmt.Errorf("cancel run %s: %w: run is already %s", id, ErrConflict, r.State)
		}
		ts := s.d.timeArg(now)
		if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE tasks SET state = 'cancelled', reason = ?, finished_at = ?, updated_at = ? WHERE run_id = ? AND state IN "+openStates),
			reason, ts, ts, id); err != nil {
			return fmt.Errorf("cancel tasks of run %s: %w", id, err)
		}
		out, err = updateOne(ctx, s, tx, runUpdate(id, "state = 'cancelled', finished_at = ?, updated_at = ?", ts, ts), scanRun)
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

// settleRuns finishes, in a transaction of its own, the runs of tasks that
// a committed transaction ended. finishRuns inside the ending transaction
// is not enough where writers run at once (PostgreSQL, MySQL): two
// transactions ending a run's last two tasks each see the other's task
// still open (it is not committed yet), so neither finishes the run, which
// then stays running with every task done (seen with two server replicas
// storing reports side by side). Looking again after the commit, the
// later of the two sees both. With one writer (SQLite) the look inside
// the transaction sees everything, and nothing more is done.
func (s *sqlStore) settleRuns(ctx context.Context, tasks []Task, now time.Time) error {
	if s.d.forUpdate() == "" || !slices.ContainsFunc(tasks, func(t Task) bool { return t.RunID != "" }) {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.finishRuns(ctx, tx, tasks, now) })
}

// finishRuns ends every running run of the tasks whose tasks are all
// terminal: succeeded if all succeeded, else failed.
func (s *sqlStore) finishRuns(ctx context.Context, tx *sql.Tx, tasks []Task, now time.Time) error {
	seen := map[string]bool{}
	var ids []string
	for _, t := range tasks {
		if t.RunID == "" || seen[t.RunID] {
			continue
		}
		seen[t.RunID] = true
		ids = append(ids, t.RunID)
	}
	if len(ids) == 0 {
		return nil
	}
	in, idArgs := inList(ids)
	ts := s.d.timeArg(now)
	q := `UPDATE runs SET finished_at = ?, updated_at = ?,
	state = CASE WHEN EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.id AND t.state <> 'succeeded') THEN 'failed' ELSE 'succeeded' END
WHERE state = 'running' AND id IN ` + in + `
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.id AND t.state IN ` + openStates + `)`
	if _, err := tx.ExecContext(ctx, s.d.rebind(q), append([]any{ts, ts}, idArgs...)...); err != nil {
		return fmt.Errorf("finish runs: %w", err)
	}
	return nil
}
