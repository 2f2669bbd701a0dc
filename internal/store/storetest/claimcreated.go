package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testClaimCreated checks the claim of tasks just created: only those
// whose source holds a live session and whose destination is online, the
// exclusive rule across the run and against tasks already running, at
// most limit per source, and nothing twice.
func testClaimCreated(t *testing.T, st store.Store) {
	ctx := context.Background()
	onNodes(t, st, "cr", map[string]string{"cr-a": "cr-1", "cr-b": "cr-2", "cr-c": "cr-3", "cr-d": "cr-4", "cr-poll": "cr-5", "cr-e": "cr-6"},
		"cr-a", "cr-b", "cr-c", "cr-e")
	excl := func(src, dst string) store.Task { return exclusive(mkTask(src, dst, "tcp")) }
	// Running already: an exclusive task on node cr-6 (cr-e → cr-d).
	busy := create(t, st, excl("cr-e", "cr-d"))[0]
	if got, err := st.ClaimCreated(ctx, []int64{busy.ID}, at(1), 10, time.Second); err != nil || len(got) != 1 {
		t.Fatalf("claim the busy node's task: %v %v", got, err)
	}
	ts := create(t, st,
		excl("cr-a", "cr-b"),              // 0: claimed
		excl("cr-c", "cr-b"),              // 1: node cr-2 taken by 0 in the same claim
		excl("cr-c", "cr-e"),              // 2: node cr-6 busy with the running task
		mkTask("cr-poll", "cr-a", "ping"), // 3: source holds no session
		mkTask("cr-a", "cr-c", "ping"),    // 4: claimed
		mkTask("cr-a", "cr-c", "ping"),    // 5: over the limit of 2 for cr-a
		mkTask("cr-c", "cr-gone", "ping"), // 6: destination unknown
	)
	ids := make([]int64, len(ts))
	for i, tk := range ts {
		ids[i] = tk.ID
	}
	got, err := st.ClaimCreated(ctx, ids, at(2), 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ts[0].TaskID, ts[4].TaskID}
	var gotIDs []string
	for _, g := range got {
		gotIDs = append(gotIDs, g.TaskID)
		if g.State != store.TaskDispatched || g.DispatchedAt == nil || !g.DispatchedAt.Equal(at(2)) || g.Deadline == nil || !g.Deadline.Equal(at(2).Add(g.Timeout+5*time.Second)) {
			t.Errorf("claimed %s: state %s dispatched %v deadline %v (timeout %v)", g.TaskID, g.State, g.DispatchedAt, g.Deadline, g.Timeout)
		}
	}
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("claimed %v, want %v (oldest first)", gotIDs, want)
	}
	// Again: nothing is claimed twice; what was left is still pending and
	// claimable by its source's own claim.
	if again, err := st.ClaimCreated(ctx, ids, at(3), 2, 5*time.Second); err != nil || len(again) != 1 || again[0].TaskID != ts[5].TaskID {
		t.Errorf("second claim of the same ids: %v %v; want only the task over the limit", again, err)
	}
	if own, err := st.ClaimTasks(ctx, "cr-poll", at(3), 10, time.Second); err != nil || len(own) != 1 || own[0].TaskID != ts[3].TaskID {
		t.Errorf("the polling source's own claim: %v %v", own, err)
	}
	// Listed by when they were dispatched (the leader's look for offers
	// lost): at(1) is before the window, at(3) at its end.
	win, _, err := st.ListTasks(ctx, store.TaskFilter{State: store.TaskDispatched, DispatchedAfter: at(2), DispatchedBefore: at(3)}, store.Page{})
	var winIDs []string
	for _, w := range win {
		winIDs = append(winIDs, w.TaskID)
	}
	if err != nil || !slices.Equal(winIDs, want) {
		t.Errorf("dispatched in [2 s, 3 s): %v %v; want %v", winIDs, err, want)
	}
	// The lease expired: no source is held, nothing is claimed.
	late := create(t, st, mkTask("cr-b", "cr-a", "ping"))[0]
	if got, err := st.ClaimCreated(ctx, []int64{late.ID}, at(120), 2, time.Second); err != nil || len(got) != 0 {
		t.Errorf("claim after the presence lease expired: %v %v", got, err)
	}
	for _, c := range []struct {
		name  string
		ids   []int64
		limit int
		grace time.Duration
	}{
		{"limit 0", ids, 0, 0},
		{"negative grace", ids, 1, -time.Second},
		{"too many ids", make([]int64, 1001), 1, 0},
	} {
		if _, err := st.ClaimCreated(ctx, c.ids, at(4), c.limit, c.grace); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
}

// testCreateRunAndClaim checks a run created and claimed in one
// transaction: the same choice as ClaimCreated (held sources, online
// destinations, the exclusive rule within the run and against tasks
// already dispatched, the per-source limit), types it must not claim
// left pending, a run that allows concurrency not exclusive, and the
// stored rows as returned; both when the transaction reads the endpoints
// and when the caller read them (CreateClaim.Agents: the server's way).
func testCreateRunAndClaim(t *testing.T, st store.Store) {
	t.Run("agents read inside", func(t *testing.T) { createRunAndClaim(t, st, "rc", false) })
	t.Run("agents read before", func(t *testing.T) { createRunAndClaim(t, st, "ra", true) })
}

// createRunAndClaim is testCreateRunAndClaim with agents named after p,
// their endpoints read before the creation when readBefore is set.
func createRunAndClaim(t *testing.T, st store.Store, p string, readBefore bool) {
	ctx := context.Background()
	onNodes(t, st, p, map[string]string{p + "-a": p + "-1", p + "-b": p + "-2", p + "-c": p + "-3", p + "-poll": p + "-4"},
		p+"-a", p+"-b", p+"-c")
	excl := func(src, dst, typ string) store.Task { return exclusive(mkTask(p+"-"+src, p+"-"+dst, typ)) }
	task := func(src, dst, typ string) store.Task { return mkTask(p+"-"+src, p+"-"+dst, typ) }
	claim := store.CreateClaim{Limit: 2, Grace: 5 * time.Second, Except: []string{"iperf3"}}
	if readBefore {
		got, err := st.GetAgents(ctx, []string{p + "-a", p + "-b", p + "-c", p + "-poll"}, at(2))
		if err != nil {
			t.Fatal(err)
		}
		// The read covers every endpoint, as the server's does: the
		// unknown destination is there as offline.
		claim.Agents = map[string]store.Agent{p + "-gone": {PodUID: p + "-gone", Status: store.AgentOffline}}
		for _, a := range got {
			claim.Agents[a.PodUID] = a
		}
	}
	run, ts, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{
		excl("a", "b", "tcp"),     // 0: claimed
		excl("c", "b", "tcp"),     // 1: node 2 taken by 0
		task("poll", "a", "ping"), // 2: source holds no session
		task("c", "a", "iperf3"),  // 3: a type never claimed at creation
		task("a", "c", "ping"),    // 4: claimed
		task("a", "c", "ping"),    // 5: over the limit of 2 for a
		task("c", "gone", "ping"), // 6: destination unknown (offline)
	}, at(2), claim)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TaskState{store.TaskDispatched, store.TaskPending, store.TaskPending, store.TaskPending, store.TaskDispatched, store.TaskPending, store.TaskPending}
	for i, tk := range ts {
		stored, err := st.GetTask(ctx, tk.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != want[i] || stored.State != want[i] {
			t.Errorf("task %d: returned %s, stored %s; want %s", i, tk.State, stored.State, want[i])
			continue
		}
		if want[i] != store.TaskDispatched {
			if stored.DispatchedAt != nil || stored.Deadline != nil {
				t.Errorf("pending task %d has dispatched_at %v, deadline %v", i, stored.DispatchedAt, stored.Deadline)
			}
			continue
		}
		if stored.DispatchedAt == nil || !stored.DispatchedAt.Equal(at(2)) || stored.Deadline == nil || !stored.Deadline.Equal(at(2).Add(stored.Timeout+5*time.Second)) {
			t.Errorf("dispatched task %d: dispatched_at %v deadline %v (timeout %v)", i, stored.DispatchedAt, stored.Deadline, stored.Timeout)
		}
	}
	if run.Counts[store.TaskDispatched] != 2 || run.Counts[store.TaskPending] != 5 {
		t.Errorf("run counts %v", run.Counts)
	}
	// What was left is claimed by its source's own claim, under the
	// same rule: c's exclusive task waits while task 0 holds node 2.
	if own, err := st.ClaimTasks(ctx, p+"-c", at(3), 10, time.Second); err != nil || len(own) != 1 || own[0].TaskID != ts[3].TaskID {
		t.Errorf("%s-c's own claim: %v %v; want only the iperf3 task", p, own, err)
	}
	// Another run: node 2 is still busy with task 0; nodes 3 and 4 are
	// free.
	_, next, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{
		excl("c", "b", "tcp"), excl("c", "poll", "tcp"),
	}, at(3), claim)
	if err != nil || next[0].State != store.TaskPending || next[1].State != store.TaskDispatched {
		t.Errorf("exclusive tasks toward a busy node and between free ones: %v %v; want pending, dispatched", next, err)
	}
	// A run that allows concurrency: its exclusive tasks share nodes.
	_, conc, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix", AllowConcurrency: true}, []store.Task{
		excl("b", "a", "tcp"), excl("c", "a", "tcp"),
	}, at(4), claim)
	if err != nil || conc[0].State != store.TaskDispatched || conc[1].State != store.TaskDispatched {
		t.Errorf("a concurrent run's tasks: %v %v; want both dispatched", conc, err)
	}
	if _, _, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{task("a", "b", "ping")}, at(5), store.CreateClaim{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("limit 0: %v, want ErrInvalid", err)
	}
}

// testCreateClaimNotifyAndAgents: Notify is called inside the creating
// transaction with exactly the tasks claimed and the replica holding
// each source's session; given Agents covering every endpoint decide the
// claim without a read (here they say an agent no lease holds is held),
// and Agents missing one are not used.
func testCreateClaimNotifyAndAgents(t *testing.T, st store.Store) {
	ctx := context.Background()
	onNodes(t, st, "cn", map[string]string{"cn-a": "cn-1", "cn-b": "cn-2", "cn-poll": "cn-3"}, "cn-a", "cn-b")
	var calls int
	var claimed []string
	var heldBy map[string]string
	claim := store.CreateClaim{Limit: 5, Grace: time.Second, Notify: func(ts []store.Task, by map[string]string) []store.Notice {
		calls++
		claimed, heldBy = nil, by
		for _, tk := range ts {
			claimed = append(claimed, tk.TaskID)
		}
		return nil
	}}
	_, ts, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{
		mkTask("cn-a", "cn-b", "ping"),    // claimed
		mkTask("cn-poll", "cn-a", "ping"), // no session: pending
	}, at(2), claim)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || !slices.Equal(claimed, []string{ts[0].TaskID}) || !maps.Equal(heldBy, map[string]string{"cn-a": "cn-r1"}) {
		t.Errorf("Notify called %d times with %v, held by %v; want once with task 0, cn-a held by cn-r1", calls, claimed, heldBy)
	}
	agents := map[string]store.Agent{}
	got, err := st.GetAgents(ctx, []string{"cn-a", "cn-b", "cn-poll"}, at(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		agents[a.PodUID] = a
	}
	poll := agents["cn-poll"]
	poll.HeldBy = "cn-r2" // as if a session opened on another replica since the store was read
	agents["cn-poll"] = poll
	claim.Agents = agents
	_, ts, err = st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{mkTask("cn-poll", "cn-b", "ping")}, at(3), claim)
	if err != nil || ts[0].State != store.TaskDispatched || heldBy["cn-poll"] != "cn-r2" {
		t.Errorf("with Agents saying cn-poll is held: %v %v, held by %v; want dispatched, by cn-r2", ts, err, heldBy)
	}
	delete(agents, "cn-b")
	_, ts, err = st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{mkTask("cn-poll", "cn-b", "ping")}, at(4), claim)
	if err != nil || ts[0].State != store.TaskPending {
		t.Errorf("with Agents missing cn-b (the store's read says cn-poll holds no session): %v %v; want pending", ts, err)
	}
}

// onNodes registers agents (uid → node) at 0 s and marks those in held
// as holding sessions on replica prefix-r1, whose presence lease lives
// a minute.
func onNodes(t *testing.T, st store.Store, prefix string, nodes map[string]string, held ...string) {
	t.Helper()
	ctx := context.Background()
	lease := "presence " + prefix + "-r1"
	if l, err := st.HoldLease(ctx, lease, prefix+"-r1", at(0), time.Minute); err != nil || !l.Held {
		t.Fatalf("hold %s: %+v %v", lease, l, err)
	}
	for uid, node := range nodes {
		beat(t, st, uid, node, at(0))
	}
	var ps []store.Presence
	for _, uid := range held {
		ps = append(ps, store.Presence{PodUID: uid, Held: true})
	}
	if _, err := st.SetPresence(ctx, lease, ps, at(0)); err != nil {
		t.Fatal(err)
	}
}

// exclusive returns tk made exclusive.
func exclusive(tk store.Task) store.Task {
	tk.Exclusive = true
	return tk
}
