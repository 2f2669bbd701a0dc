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
)

// The heartbeat upsert: every column is written on insert; a known pod_uid
// keeps its id and register_time.
var (
	agentWriteCols  = []string{"pod_uid", "pod_name", "pod_namespace", "pod_ip", "node_name", "node_ip", "host_network", "responder_addr", "version", "status", "register_time", "last_heartbeat", "node_labels"}
	agentUpdateCols = []string{"pod_name", "pod_namespace", "pod_ip", "node_name", "node_ip", "host_network", "responder_addr", "version", "status", "last_heartbeat", "node_labels"}
)

// heartbeatArgs checks a and returns the arguments of the upsert, in
// agentWriteCols order.
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
	labels := ""
	if len(a.NodeLabels) > 0 {
		raw, err := json.Marshal(a.NodeLabels)
		if err != nil {
			return nil, fmt.Errorf("heartbeat from %s: node labels: %w", a.PodUID, err)
		}
		if len(raw) > MaxNodeLabelsLen {
			return nil, fmt.Errorf("heartbeat from %s: %w: node labels take %d bytes, over %d", a.PodUID, ErrInvalid, len(raw), MaxNodeLabelsLen)
		}
		labels = string(raw)
	}
	ts := s.d.timeArg(now)
	return []any{a.PodUID, a.PodName, a.PodNamespace, a.PodIP, a.NodeName, a.NodeIP, a.HostNetwork,
		a.ResponderAddr, a.Version, int64(a.Status), ts, ts, labels}, nil
}

func (s *sqlStore) UpsertHeartbeat(ctx context.Context, a Agent, now time.Time) (Agent, error) {
	if !s.d.returning() {
		// Upsert and read back: two statements, so one transaction.
		got, err := s.RegisterAgents(ctx, []Agent{a}, now)
		if err != nil {
			return Agent{}, err
		}
		return got[0], nil
	}
	args, err := s.heartbeatArgs(a, now)
	if err != nil {
		return Agent{}, err
	}
	got, err := scanAgent(s.w.QueryRowContext(ctx, s.upsertAgentSQL, args...))
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
	if s.d.returning() {
		if err := s.inTx(ctx, func(tx *sql.Tx) error { return s.registerRows(ctx, tx, agents, all, out) }); err != nil {
			return nil, err
		}
		return out, nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		upsert, err := tx.PrepareContext(ctx, s.upsertAgentSQL)
		if err != nil {
			return fmt.Errorf("prepare heartbeat: %w", err)
		}
		defer upsert.Close()
		var read *sql.Stmt // reads the row back where the upsert returns nothing
		if !s.d.returning() {
			if read, err = tx.PrepareContext(ctx, s.readAgentSQL); err != nil {
				return fmt.Errorf("prepare heartbeat: %w", err)
			}
			defer read.Close()
		}
		for i, args := range all {
			if read == nil {
				out[i], err = scanAgent(upsert.QueryRowContext(ctx, args...))
			} else if _, err = upsert.ExecContext(ctx, args...); err == nil {
				out[i], err = scanAgent(read.QueryRowContext(ctx, agents[i].PodUID))
			}
			if err != nil {
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

// registerChunk bounds the agents of one multi-row registration upsert
// (13 arguments each, far below SQLite's and PostgreSQL's limits).
const registerChunk = 200

// registerRows writes a registration batch with multi-row upserts that
// return the rows (dialects with RETURNING): one round trip per
// registerChunk agents instead of one per agent, so a burst of
// registrations on a database across the network (PostgreSQL under
// server replicas) holds its row locks for milliseconds, not for 500
// round trips. A pod uid repeated in the batch starts a new statement (one
// upsert cannot touch a row twice); the later heartbeat wins, as it would
// one statement after the other. Rows come back in no promised order, so
// they are matched by pod uid.
func (s *sqlStore) registerRows(ctx context.Context, tx *sql.Tx, agents []Agent, all [][]any, out []Agent) error {
	set := make([]string, len(agentUpdateCols))
	for i, c := range agentUpdateCols {
		set[i] = c + " = excluded." + c
	}
	row := "(" + placeholders(len(agentWriteCols)) + ")"
	for start := 0; start < len(agents); {
		end := start
		seen := map[string]bool{}
		for end < len(agents) && end-start < registerChunk && !seen[agents[end].PodUID] {
			seen[agents[end].PodUID] = true
			end++
		}
		rows := make([]string, 0, end-start)
		var args []any
		for i := start; i < end; i++ {
			rows = append(rows, row)
			args = append(args, all[i]...)
		}
		q := s.d.rebind("INSERT INTO agents (" + strings.Join(agentWriteCols, ", ") + ") VALUES " + strings.Join(rows, ", ") +
			" ON CONFLICT (pod_uid) DO UPDATE SET " + strings.Join(set, ", ") + " RETURNING " + agentCols)
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("heartbeats from %s and %d more: %w", agents[start].PodUID, end-start-1, err)
		}
		got := make(map[string]Agent, end-start)
		for rs.Next() {
			a, err := scanAgent(rs)
			if err != nil {
				rs.Close()
				return fmt.Errorf("heartbeats from %s and %d more: %w", agents[start].PodUID, end-start-1, err)
			}
			got[a.PodUID] = a
		}
		if err := rs.Close(); err != nil {
			return fmt.Errorf("heartbeats from %s and %d more: %w", agents[start].PodUID, end-start-1, err)
		}
		if err := rs.Err(); err != nil {
			return fmt.Errorf("heartbeats from %s and %d more: %w", agents[start].PodUID, end-start-1, err)
		}
		for i := start; i < end; i++ {
			a, ok := got[agents[i].PodUID]
			if !ok {
				return fmt.Errorf("heartbeat from %s: the upsert returned no row", agents[i].PodUID)
			}
			out[i] = a
		}
		start = end
	}
	return nil
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
			at := s.d.timeArg(time.UnixMicro(k.at))
			// "+status": keep SQLite from scanning the status index
			// instead of looking the uids up. Never back in time: with
			// server replicas, one that the agent left may flush a time
			// older than another's.
			n, err := s.updateByUIDs(ctx, tx, groups[k], func(in string, uidArgs []any) (string, []any) {
				return "UPDATE agents SET last_heartbeat = ?, status = ? WHERE pod_uid IN " + in + " AND +status IN (1, 2) AND last_heartbeat <= ?",
					append(append([]any{at, int64(k.status)}, uidArgs...), at)
			})
			if err != nil {
				return fmt.Errorf("touch agents: %w", err)
			}
			total += n
		}
		return nil
	})
	return total, err
}

// updateByUIDs runs the statement stmt makes for each chunk of at most
// touchChunk uids (in: the chunk's IN list, uidArgs: its arguments) in tx,
// and returns the rows they changed.
func (s *sqlStore) updateByUIDs(ctx context.Context, tx *sql.Tx, uids []string, stmt func(in string, uidArgs []any) (string, []any)) (int, error) {
	total := 0
	for len(uids) > 0 {
		n := min(len(uids), touchChunk)
		in, uidArgs := inList(uids[:n])
		q, args := stmt(in, uidArgs)
		res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
		if err != nil {
			return total, err
		}
		if k, err := res.RowsAffected(); err == nil {
			total += int(k)
		}
		uids = uids[n:]
	}
	return total, nil
}

func (s *sqlStore) GetAgent(ctx context.Context, podUID string) (Agent, error) {
	a, err := scanAgent(s.r.QueryRowContext(ctx, s.readAgentSQL, podUID))
	if errors.Is(err, sql.ErrNoRows) {
		return Agent{}, fmt.Errorf("agent %s: %w", podUID, ErrNotFound)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("get agent %s: %w", podUID, err)
	}
	return a, nil
}

// batchRows is how many rows one statement reads or inserts by key
// (within every dialect's limit on a statement's parameters).
const batchRows = 500

func (s *sqlStore) GetAgents(ctx context.Context, podUIDs []string, now time.Time) ([]Agent, error) {
	// A run's creation reads its endpoints here first: on its lane
	// (lane.go), and on the pool when the lane's connection failed (a
	// read is safe to make again).
	if c := s.hot.get(ctx); c != nil {
		out, err := s.getAgents(ctx, c, podUIDs, now)
		s.hot.put(c, err != nil)
		if err == nil || ctx.Err() != nil {
			return out, err
		}
	}
	return s.getAgents(ctx, s.r, podUIDs, now)
}

func (s *sqlStore) getAgents(ctx context.Context, q querier, podUIDs []string, now time.Time) ([]Agent, error) {
	var out []Agent
	for chunk := range slices.Chunk(podUIDs, batchRows) {
		args := make([]any, 0, len(chunk)+1)
		args = append(args, s.d.timeArg(now))
		for _, u := range chunk {
			args = append(args, u)
		}
		rows, err := q.QueryContext(ctx, s.d.rebind("SELECT "+agentColsOf("a")+`, l.holder
FROM agents a LEFT JOIN leases l ON l.name = a.presence_lease AND l.expires_at > ?
WHERE a.pod_uid IN (`+placeholders(len(chunk))+")"), args...)
		if err != nil {
			return nil, fmt.Errorf("get agents: %w", err)
		}
		for rows.Next() {
			var heldBy sql.NullString
			a, err := scanAgent(extraScan{rows, []any{&heldBy}})
			a.HeldBy = heldBy.String
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("get agents: %w", err)
			}
			out = append(out, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("get agents: %w", err)
		}
	}
	return out, nil
}

func (s *sqlStore) ListAgents(ctx context.Context, f AgentFilter) ([]Agent, error) {
	var w where
	if !f.IncludeOffline {
		w.add("status IN (1, 2)")
	}
	if f.Node != "" {
		w.add("node_name = ?", f.Node)
	}
	rows, err := s.r.QueryContext(ctx, s.d.rebind("SELECT "+agentCols+" FROM agents"+w.sql()+" ORDER BY id"), w.args...)
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
	// An agent whose row names a presence lease alive now holds a session
	// on that lease's replica: it is present whatever its time.
	where := "status IN (1, 2) AND last_heartbeat < ? AND NOT EXISTS (SELECT 1 FROM leases WHERE leases.name = agents.presence_lease AND leases.expires_at > ?)"
	args := []any{s.d.timeArg(silentSince), s.d.timeArg(now)}
	if _, ok := s.d.(postgresDialect); ok {
		// Skip the rows another transaction holds: with server replicas
		// those are a flusher writing the agents' times (they are alive),
		// and waiting for it (or deadlocking with it, as the two lock rows
		// in different orders) held every replica's pool and failed the
		// flushes whose times would have kept the agents online. A row
		// skipped and still silent is marked at the next pass.
		where = "id IN (SELECT id FROM agents WHERE " + where + " FOR UPDATE SKIP LOCKED) AND " + where
		args = append(args, args...)
	}
	out, err := updateReturning(ctx, s, nil, update{table: "agents", key: "id", cols: agentCols,
		set: "status = 3", where: where, whereArgs: args,
	}, scanAgent)
	if err != nil {
		return nil, fmt.Errorf("mark silent agents offline: %w", err)
	}
	return out, nil
}

func (s *sqlStore) SetPresence(ctx context.Context, lease string, ps []Presence, now time.Time) (int, error) {
	if lease == "" {
		return 0, fmt.Errorf("set presence: %w: no lease", ErrInvalid)
	}
	// One statement per kind and time, for a few hundred agents each.
	type key struct {
		held bool
		at   int64
	}
	groups := map[key][]string{}
	var keys []key
	for i, p := range ps {
		if p.PodUID == "" {
			return 0, fmt.Errorf("presence %d: %w: pod_uid is empty", i, ErrInvalid)
		}
		k := key{p.Held, p.Time(now).UnixMicro()}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p.PodUID)
	}
	// Never move a time back (another replica may have stored a later one).
	const setTime = "last_heartbeat = CASE WHEN last_heartbeat < ? THEN ? ELSE last_heartbeat END"
	total := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		total = 0
		for _, k := range keys {
			at := s.d.timeArg(time.UnixMicro(k.at))
			n, err := s.updateByUIDs(ctx, tx, groups[k], func(in string, uidArgs []any) (string, []any) {
				if k.held {
					return "UPDATE agents SET presence_lease = ?, " + setTime + " WHERE pod_uid IN " + in,
						append([]any{lease, at, at}, uidArgs...)
				}
				return "UPDATE agents SET presence_lease = '', " + setTime + " WHERE pod_uid IN " + in + " AND presence_lease = ?",
					append(append([]any{at, at}, uidArgs...), lease)
			})
			if err != nil {
				return fmt.Errorf("set presence: %w", err)
			}
			total += n
		}
		return nil
	})
	return total, err
}
