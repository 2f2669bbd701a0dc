package store

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// claimCandidate is a pending task with what the exclusive rule needs.
type claimCandidate struct {
	id        int64
	src       string // its source agent's pod UID
	timeout   time.Duration
	exclusive bool     // exclusive and its run does not allow concurrency
	nodes     []string // node keys of its endpoints
}

// nodeKey names the node an endpoint is on; an endpoint with no known node
// is its own node.
func nodeKey(node, podUID string) string {
	if node != "" {
		return "node:" + node
	}
	return "pod:" + podUID
}

// sameOutcome reports whether a finished task already holds what r says.
func (s *sqlStore) sameOutcome(ctx context.Context, tx *sql.Tx, t Task, r Report) (bool, error) {
	if t.State != r.State || t.Reason != r.Reason || t.RawSize != int64(len(r.RawResult)) || !sameJSON(t.Result, r.Result) {
		return false, nil
	}
	if t.RawSize == 0 {
		return true, nil
	}
	var raw string
	err := tx.QueryRowContext(ctx, s.d.rebind("SELECT raw FROM task_outputs WHERE task_id = ?"), t.TaskID).Scan(&raw)
	if err != nil {
		return false, fmt.Errorf("read output of task %s: %w", t.TaskID, err)
	}
	return raw == r.RawResult, nil
}

// sameJSON compares two JSON texts ignoring insignificant white space (a
// database may store JSON reformatted).
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// maxClaimScan bounds how many pending tasks one claim examines.
const maxClaimScan = 1000

func (s *sqlStore) ClaimTasks(ctx context.Context, agentUID string, now time.Time, limit int, grace time.Duration) ([]Task, error) {
	if agentUID == "" {
		return nil, fmt.Errorf("claim tasks: %w: agent pod_uid is empty", ErrInvalid)
	}
	if err := checkClaim(limit, grace); err != nil {
		return nil, fmt.Errorf("claim tasks for %s: %w", agentUID, err)
	}
	// The candidates are read first, on the read pool: most claims find
	// none and need no write lock, and one that finds some does not read
	// them again inside its transaction (each statement is a round trip
	// on the task's dispatch latency). They may be read before their
	// nodes are locked: the update claims a task only while it is still
	// pending.
	cands, err := s.readCandidates(ctx, s.r, `JOIN agents da ON da.pod_uid = t.dst_pod_uid AND da.status IN (1, 2)
LEFT JOIN agents sa ON sa.pod_uid = t.src_pod_uid
LEFT JOIN runs r ON r.id = t.run_id
WHERE t.src_pod_uid = ? AND t.state = 'pending'
ORDER BY t.id LIMIT ?`, agentUID, maxClaimScan)
	if err != nil {
		return nil, fmt.Errorf("claim tasks for %s: %w", agentUID, err)
	}
	out, err := s.claim(ctx, cands, now, limit, grace)
	if err != nil {
		return nil, fmt.Errorf("claim tasks for %s: %w", agentUID, err)
	}
	return out, nil
}

func (s *sqlStore) ClaimCreated(ctx context.Context, ids []int64, now time.Time, limit int, grace time.Duration) ([]Task, error) {
	if err := checkClaim(limit, grace); err != nil {
		return nil, fmt.Errorf("claim created tasks: %w", err)
	}
	if len(ids) == 0 {
		return []Task{}, nil
	}
	if len(ids) > maxClaimScan {
		return nil, fmt.Errorf("claim created tasks: %w: %d tasks, at most %d at once", ErrInvalid, len(ids), maxClaimScan)
	}
	in := "(" + placeholders(len(ids)) + ")"
	args := make([]any, 0, len(ids)+1)
	args = append(args, s.d.timeArg(micro(now)))
	for _, id := range ids {
		args = append(args, id)
	}
	// Read on the write pool: the tasks were created a moment ago, and a
	// read pool may be a replica behind the primary.
	cands, err := s.readCandidates(ctx, s.w, `JOIN agents da ON da.pod_uid = t.dst_pod_uid AND da.status IN (1, 2)
JOIN agents sa ON sa.pod_uid = t.src_pod_uid AND sa.status IN (1, 2)
JOIN leases pl ON pl.name = sa.presence_lease AND pl.expires_at > ?
LEFT JOIN runs r ON r.id = t.run_id
WHERE t.id IN `+in+` AND t.state = 'pending'
ORDER BY t.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("claim created tasks: %w", err)
	}
	out, err := s.claim(ctx, cands, now, limit, grace)
	if err != nil {
		return nil, fmt.Errorf("claim created tasks: %w", err)
	}
	return out, nil
}

// dispatchAtCreate marks, inside a run's creating transaction and before
// its insert, the new tasks (out) that can go to their sources at once as
// dispatched: the candidates are the tasks whose source is online and
// held by a live presence lease and whose destination is online (as the
// caller read them, CreateClaim.Agents, or as the transaction reads them
// when those miss one), chosen by pick as any claim's are. heldBy names,
// for each chosen task's source, the replica holding its session.
func (s *sqlStore) dispatchAtCreate(ctx context.Context, tx *sql.Tx, out []Task, allowConcurrency bool, now time.Time, c CreateClaim) (heldBy map[string]string, err error) {
	var uids []string
	seen := map[string]bool{}
	for _, t := range out {
		if slices.Contains(c.Except, t.Type) {
			continue
		}
		for _, u := range []string{t.SrcPodUID, t.DstPodUID} {
			if !seen[u] {
				seen[u] = true
				uids = append(uids, u)
			}
		}
	}
	if len(uids) == 0 {
		return nil, nil
	}
	agents := c.Agents
	missing := func(u string) bool { _, ok := agents[u]; return !ok }
	if slices.ContainsFunc(uids, missing) {
		// The caller's read misses one: the transaction reads them all.
		read, err := s.getAgents(ctx, tx, uids, now)
		if err != nil {
			return nil, fmt.Errorf("read the new tasks' agents: %w", err)
		}
		agents = make(map[string]Agent, len(read))
		for _, a := range read {
			agents[a.PodUID] = a
		}
	}
	var cands []claimCandidate
	for i, t := range out {
		src, dst := agents[t.SrcPodUID], agents[t.DstPodUID] // an unknown one is not online
		if slices.Contains(c.Except, t.Type) || !src.Status.Online() || src.HeldBy == "" || !dst.Status.Online() {
			continue
		}
		cands = append(cands, claimCandidate{id: int64(i), src: t.SrcPodUID, timeout: t.Timeout,
			exclusive: t.Exclusive && !allowConcurrency,
			nodes:     []string{nodeKey(src.NodeName, t.SrcPodUID), nodeKey(dst.NodeName, t.DstPodUID)}})
	}
	if len(cands) == 0 {
		return nil, nil
	}
	chosen, err := s.pick(ctx, tx, cands, c.Limit)
	if err != nil {
		return nil, err
	}
	heldBy = make(map[string]string, len(chosen))
	for _, ch := range chosen {
		t := &out[ch.id] // id is the task's index here: it has no key yet
		at, deadline := now, now.Add(t.Timeout+c.Grace)
		t.State, t.DispatchedAt, t.Deadline = TaskDispatched, &at, &deadline
		heldBy[t.SrcPodUID] = agents[t.SrcPodUID].HeldBy
	}
	return heldBy, nil
}

// checkClaim checks a claim's limit and grace.
func checkClaim(limit int, grace time.Duration) error {
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalid, limit)
	}
	if grace < 0 {
		return fmt.Errorf("%w: grace %s is negative", ErrInvalid, grace)
	}
	return nil
}

// claim moves to dispatched, in one transaction, the candidates pick
// chooses. A candidate no longer pending (cancelled meanwhile) is left
// out. The update is one statement per distinct timeout (a matrix round's
// tasks share one), not one per task.
func (s *sqlStore) claim(ctx context.Context, cands []claimCandidate, now time.Time, limit int, grace time.Duration) ([]Task, error) {
	if len(cands) == 0 {
		return []Task{}, nil
	}
	now = micro(now)
	out := []Task{}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		chosen, err := s.pick(ctx, tx, cands, limit)
		if err != nil {
			return err
		}
		byTimeout := map[time.Duration][]any{}
		var timeouts []time.Duration
		for _, c := range chosen {
			if _, ok := byTimeout[c.timeout]; !ok {
				timeouts = append(timeouts, c.timeout)
			}
			byTimeout[c.timeout] = append(byTimeout[c.timeout], c.id)
		}
		ts := s.d.timeArg(now)
		for _, timeout := range timeouts {
			ids := byTimeout[timeout]
			got, err := updateReturning(ctx, s, tx, update{table: "tasks", key: "id", cols: taskCols,
				set: "state = 'dispatched', dispatched_at = ?, updated_at = ?, deadline = ?", setArgs: []any{ts, ts, s.d.timeArg(now.Add(timeout + grace))},
				where: "id IN (" + placeholders(len(ids)) + ") AND state = 'pending'", whereArgs: ids,
			}, scanTask)
			if err != nil {
				return fmt.Errorf("dispatch %d tasks: %w", len(ids), err)
			}
			out = append(out, got...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Task) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// pick chooses, inside a claim's transaction, the candidates that may
// start, in their order: at most limit per source, exclusive ones only
// on nodes no other exclusive task holds (counting those chosen here).
// It takes the claim locks first (lockClaims, and lockNodes for the
// exclusive candidates' nodes), so that the nodes it reads as free stay
// free until the transaction ends.
func (s *sqlStore) pick(ctx context.Context, tx *sql.Tx, cands []claimCandidate, limit int) ([]claimCandidate, error) {
	if err := s.d.lockClaims(ctx, tx); err != nil {
		return nil, fmt.Errorf("lock claims: %w", err)
	}
	var nodes []string
	for _, c := range cands {
		if c.exclusive {
			nodes = append(nodes, c.nodes...)
		}
	}
	busy := map[string]bool{}
	if len(nodes) > 0 {
		if err := s.d.lockNodes(ctx, tx, nodes); err != nil {
			return nil, fmt.Errorf("lock nodes: %w", err)
		}
		var err error
		if busy, err = s.busyNodes(ctx, tx); err != nil {
			return nil, err
		}
	}
	perSource := map[string]int{}
	var chosen []claimCandidate
	for _, c := range cands {
		if perSource[c.src] >= limit {
			continue
		}
		if c.exclusive && (busy[c.nodes[0]] || busy[c.nodes[1]]) {
			continue
		}
		if c.exclusive {
			busy[c.nodes[0]], busy[c.nodes[1]] = true, true
		}
		perSource[c.src]++
		chosen = append(chosen, c)
	}
	return chosen, nil
}

// readCandidates reads claim candidates with q: the rest of the query
// after its FROM tasks t, and its arguments.
func (s *sqlStore) readCandidates(ctx context.Context, q querier, rest string, args ...any) ([]claimCandidate, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind(`SELECT t.id, t.timeout_ns, t.exclusive AND NOT COALESCE(r.allow_concurrency, FALSE),
	sa.node_name, t.src_pod_uid, da.node_name, t.dst_pod_uid
FROM tasks t
`+rest), args...)
	if err != nil {
		return nil, fmt.Errorf("find pending tasks: %w", err)
	}
	defer rows.Close()
	var cands []claimCandidate
	for rows.Next() {
		var c claimCandidate
		var timeout int64
		var srcNode, dstNode sql.NullString
		var dst string
		if err := rows.Scan(&c.id, &timeout, &c.exclusive, &srcNode, &c.src, &dstNode, &dst); err != nil {
			return nil, fmt.Errorf("find pending tasks: %w", err)
		}
		c.timeout = time.Duration(timeout)
		c.nodes = []string{nodeKey(srcNode.String, c.src), nodeKey(dstNode.String, dst)}
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find pending tasks: %w", err)
	}
	return cands, nil
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
		busy[nodeKey(srcNode.String, src)], busy[nodeKey(dstNode.String, dst)] = true, true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find busy nodes: %w", err)
	}
	return busy, nil
}

func (s *sqlStore) MarkRunning(ctx context.Context, taskID, agentUID string, now time.Time) (Task, error) {
	// The usual case, a dispatched task of this agent, is one statement
	// (every task's start, a round's at once); anything else is looked at
	// in a transaction, for its answer.
	ts := s.d.timeArg(now)
	t, err := updateOne(ctx, s, nil, update{table: "tasks", key: "id", cols: taskCols,
		set: "state = 'running', started_at = ?, updated_at = ?", setArgs: []any{ts, ts},
		where: "task_id = ? AND src_pod_uid = ? AND state = 'dispatched'", whereArgs: []any{taskID, agentUID},
	}, scanTask)
	if err == nil {
		return t, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("mark task %s running: %w", taskID, err)
	}
	var out Task
	err = s.inTx(ctx, func(tx *sql.Tx) error {
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
		ts := s.d.timeArg(now)
		out, err = updateOne(ctx, s, tx, taskUpdate(t.ID, "state = 'running', started_at = ?, updated_at = ?", ts, ts), scanTask)
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
	dup, acked := false, false // acked: only the agent's acknowledgement was stored
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := s.lockTask(ctx, tx, r.TaskID)
		if err != nil {
			return err
		}
		same := false
		if t.SrcPodUID == r.AgentUID && t.ReportID != r.ReportID && t.State.Terminal() {
			if same, err = s.sameOutcome(ctx, tx, t, r); err != nil {
				return err
			}
		}
		switch {
		case t.SrcPodUID != r.AgentUID:
			return fmt.Errorf("task %s of agent %s: %w", r.TaskID, r.AgentUID, ErrNotFound)
		case t.ReportID == r.ReportID:
			out, dup = t, true // the same report again
			return nil
		case t.State.Terminal() && r.State == TaskCancelled && t.StoppedAt != nil:
			out, dup = t, true // acknowledged already
			return nil
		case t.State.Terminal() && r.State == TaskCancelled:
			// The agent stopped a task that had ended already (the
			// server told it to), and removed its set-up: the outcome
			// stays, the acknowledgement is kept.
			ts := s.d.timeArg(now)
			out, err = updateOne(ctx, s, tx, taskUpdate(t.ID, "stopped_at = ?, stop_reason = ?, updated_at = ?", ts, r.Reason, ts), scanTask)
			if err != nil {
				return fmt.Errorf("acknowledge the stop of task %s: %w", r.TaskID, err)
			}
			acked = true
			return nil
		case same:
			// The same result under another report id (the agent ran a
			// re-offered task twice, or lost the id): delivered once,
			// nothing written.
			out, dup = t, true
			return nil
		case t.State.Terminal() && !endedForAbsence(t):
			return fmt.Errorf("report %s for task %s: %w: task already %s", r.ReportID, r.TaskID, ErrConflict, t.State)
		case t.State == TaskPending:
			return fmt.Errorf("report %s for task %s: %w: task was never dispatched", r.ReportID, r.TaskID, ErrConflict)
		}
		if r.RawResult != "" {
			// Apart from the task row (see TaskOutput); a task completes
			// once, so there is no row yet.
			if _, err := tx.ExecContext(ctx, s.d.rebind("INSERT INTO task_outputs (task_id, raw) VALUES (?, ?)"), t.TaskID, r.RawResult); err != nil {
				return fmt.Errorf("store output of task %s: %w", r.TaskID, err)
			}
		}
		late := ""
		if t.State.Terminal() {
			late = t.Reason // ended for the agent's absence: the result is late
		}
		ts := s.d.timeArg(now)
		var stopped any // the agent stopped it itself (shutting down)
		if r.State == TaskCancelled {
			stopped = ts
		}
		out, err = updateOne(ctx, s, tx, taskUpdate(t.ID, "state = ?, reason = ?, raw_size = ?, result = ?, report_id = ?, late_reason = ?, finished_at = ?, updated_at = ?, stopped_at = ?",
			string(r.State), r.Reason, int64(len(r.RawResult)), s.jsOrNil(r.Result), r.ReportID, late, ts, ts, stopped), scanTask)
		if err != nil {
			return fmt.Errorf("complete task %s: %w", r.TaskID, err)
		}
		if late != "" && out.RunID != "" {
			return s.rejudgeRun(ctx, tx, out.RunID, now)
		}
		return s.finishRuns(ctx, tx, []Task{out}, now)
	})
	if err != nil {
		return Task{}, false, err
	}
	if !dup && !acked { // the outcome changed: its runs may end
		if err := s.settleRuns(ctx, []Task{out}, now); err != nil {
			return out, false, err
		}
	}
	return out, dup, nil
}

// endedForAbsence reports whether the server ended t for lack of news from
// its agent (gone offline, or silent past the deadline) with no result
// stored: a result that arrives later is still the task's result.
func endedForAbsence(t Task) bool {
	if t.ReportID != "" || t.DispatchedAt == nil {
		return false
	}
	return (t.State == TaskFailed && t.Reason == ReasonAgentOffline) ||
		(t.State == TaskTimedOut && t.Reason == ReasonDeadlinePassed)
}

// rejudgeRun sets a finished run (not a cancelled one) succeeded or failed
// again from its tasks, after a late result changed one of them; a running
// run is finished as by finishRuns.
func (s *sqlStore) rejudgeRun(ctx context.Context, tx *sql.Tx, runID string, now time.Time) error {
	ts := s.d.timeArg(now)
	q := `UPDATE runs SET updated_at = ?,
	state = CASE WHEN EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.id AND t.state <> 'succeeded') THEN 'failed' ELSE 'succeeded' END
WHERE id = ? AND state IN ('succeeded', 'failed')`
	if _, err := tx.ExecContext(ctx, s.d.rebind(q), ts, runID); err != nil {
		return fmt.Errorf("judge run %s again: %w", runID, err)
	}
	return s.finishRuns(ctx, tx, []Task{{RunID: runID}}, now)
}
