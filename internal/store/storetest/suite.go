package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// t0 is the suite's clock origin; every time is passed in explicitly.
var t0 = time.Date(2026, 4, 27, 7, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// Open opens the store at dsn and closes it when the test ends.
func Open(t *testing.T, dsn string) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Run is the conformance suite: every Store must pass it. dsn names a
// fresh, empty database (see ForEach).
func Run(t *testing.T, dsn string) {
	st := Open(t, dsn)
	// Subtests share the database; each uses its own agent uids.
	t.Run("agents", func(t *testing.T) { testAgents(t, st) })
	t.Run("life cycle", func(t *testing.T) { testLifeCycle(t, st) })
	t.Run("nothing stored half-way", func(t *testing.T) { testAtomicCreate(t, st) })
	t.Run("report dedupe", func(t *testing.T) { testDedupe(t, st) })
	t.Run("concurrent claims", func(t *testing.T) { testConcurrentClaims(t, st) })
	t.Run("exclusive nodes", func(t *testing.T) { testExclusive(t, st) })
	t.Run("offline and deadlines", func(t *testing.T) { testOfflineAndDeadlines(t, st) })
	t.Run("runs", func(t *testing.T) { testRuns(t, st) })
	t.Run("write probe", func(t *testing.T) { testCheckWrite(t, st) })
	t.Run("restart with tasks in flight", func(t *testing.T) { testRestart(t, dsn, st) })
}

func beat(t *testing.T, st store.Store, uid, node string, when time.Time) store.Agent {
	t.Helper()
	a, err := st.UpsertHeartbeat(context.Background(), store.Agent{PodUID: uid, PodName: "pod-" + uid, PodIP: "10.244.0.1",
		NodeName: node, ResponderAddr: "10.244.0.1:5201"}, when)
	if err != nil {
		t.Fatalf("heartbeat %s: %v", uid, err)
	}
	return a
}

func mkTask(src, dst, typ string) store.Task {
	return store.Task{SrcPodUID: src, SrcPodIP: "10.244.0.1", DstPodUID: dst, DstPodIP: "10.244.0.2", Type: typ, Param: "-c 1", Timeout: 20 * time.Second}
}

func create(t *testing.T, st store.Store, tasks ...store.Task) []store.Task {
	t.Helper()
	out, err := st.CreateTasks(context.Background(), "", tasks, at(0))
	if err != nil {
		t.Fatalf("create tasks: %v", err)
	}
	return out
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err %v, want %v", what, err, want)
	}
}

func testAgents(t *testing.T, st store.Store) {
	ctx := context.Background()
	a := beat(t, st, "ag-1", "n1", at(0))
	if a.ID == 0 || a.Status != store.AgentFree || !a.RegisterTime.Equal(at(0)) || !a.LastHeartbeat.Equal(at(0)) {
		t.Fatalf("registered agent %+v", a)
	}
	b := beat(t, st, "ag-1", "n1-renamed", at(1.5))
	if b.ID != a.ID || !b.RegisterTime.Equal(at(0)) || !b.LastHeartbeat.Equal(at(1.5)) || b.NodeName != "n1-renamed" {
		t.Errorf("second heartbeat: %+v (first %+v)", b, a)
	}
	batch, err := st.RegisterAgents(ctx, []store.Agent{{PodUID: "ag-2", PodName: "p2", NodeName: "n2"}, {PodUID: "ag-1", PodName: "pod-ag-1", NodeName: "n1", Status: store.AgentBusy}}, at(2))
	if err != nil || len(batch) != 2 || batch[1].ID != a.ID || batch[0].PodUID != "ag-2" || batch[0].ID == 0 || !batch[0].RegisterTime.Equal(at(2)) {
		t.Fatalf("batch heartbeat: %+v %v", batch, err)
	}
	got, err := st.GetAgent(ctx, "ag-1")
	if err != nil || got.Status != store.AgentBusy || !got.LastHeartbeat.Equal(at(2)) || got.ID != a.ID {
		t.Errorf("after batch: %+v %v", got, err)
	}
	if _, err := st.GetAgent(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown agent: %v", err)
	}
	if _, err := st.UpsertHeartbeat(ctx, store.Agent{PodUID: "ag-x", Status: store.AgentOffline}, at(2)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("heartbeat claiming offline: %v, want ErrInvalid", err)
	}
	if err := st.UpsertHeartbeats(ctx, []store.Agent{{PodUID: "ag-2", PodName: "p2", NodeName: "n2"}}, at(2)); err != nil {
		t.Fatal(err)
	}
	// Silent since before 10 s ago at t=12: ag-1 and ag-2 beat at 2 → not yet.
	off, err := st.MarkSilentOffline(ctx, at(12).Add(-10*time.Second), at(12))
	if err != nil || len(off) != 0 {
		t.Fatalf("offline at 12 s: %v %v", off, err)
	}
	beat(t, st, "ag-2", "n2", at(5))
	off, err = st.MarkSilentOffline(ctx, at(12.5).Add(-10*time.Second), at(12.5))
	if err != nil || len(off) != 1 || off[0].PodUID != "ag-1" || off[0].Status != store.AgentOffline {
		t.Fatalf("offline at 12.5 s: %+v %v", off, err)
	}
	online, _ := st.ListAgents(ctx, store.AgentFilter{})
	all, _ := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if !hasAgent(online, "ag-2") || hasAgent(online, "ag-1") || !hasAgent(all, "ag-1") {
		t.Errorf("online %v all %v", uids(online), uids(all))
	}
	byNode, _ := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true, Node: "n2"})
	if len(byNode) != 1 || byNode[0].PodUID != "ag-2" {
		t.Errorf("by node: %v", uids(byNode))
	}
	back := beat(t, st, "ag-1", "n1", at(13))
	if back.Status != store.AgentFree || back.ID != a.ID || !back.RegisterTime.Equal(at(0)) {
		t.Errorf("back online: %+v", back)
	}
	// TouchAgents: online agents get the time and status; offline and
	// unknown ones are left alone.
	beat(t, st, "ag-3", "n3", at(0))
	if off, _ := st.MarkSilentOffline(ctx, at(13).Add(-10*time.Second), at(13)); !hasAgent(off, "ag-3") {
		t.Fatalf("ag-3 not offline: %v", uids(off))
	}
	n, err := st.TouchAgents(ctx, []store.Touch{{PodUID: "ag-1", Status: store.AgentBusy, At: at(14)}, {PodUID: "ag-3", At: at(14)}, {PodUID: "nobody", At: at(14)}, {PodUID: "ag-2", At: at(13.5)}})
	if err != nil || n != 2 {
		t.Fatalf("touch: %d rows, %v; want 2", n, err)
	}
	if g, _ := st.GetAgent(ctx, "ag-2"); !g.LastHeartbeat.Equal(at(13.5)) {
		t.Errorf("touch with its own time: %v", g.LastHeartbeat)
	}
	if g, _ := st.GetAgent(ctx, "ag-1"); g.Status != store.AgentBusy || !g.LastHeartbeat.Equal(at(14)) {
		t.Errorf("touched agent: %+v", g)
	}
	if g, _ := st.GetAgent(ctx, "ag-3"); g.Status != store.AgentOffline || !g.LastHeartbeat.Equal(at(0)) {
		t.Errorf("offline agent revived by a touch: %+v", g)
	}
	if _, err := st.TouchAgents(ctx, []store.Touch{{PodUID: "ag-1", Status: store.AgentOffline, At: at(15)}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("touch to offline: %v, want ErrInvalid", err)
	}
}

func hasAgent(as []store.Agent, uid string) bool {
	for _, a := range as {
		if a.PodUID == uid {
			return true
		}
	}
	return false
}

func uids(as []store.Agent) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.PodUID)
	}
	return out
}

func testLifeCycle(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "lc-src", "lc-n1", at(0))
	// The destination is not registered yet: nothing is claimable.
	ts := create(t, st, mkTask("lc-src", "lc-dst", "ping"))
	task := ts[0]
	if task.State != store.TaskPending || task.TaskID == "" || task.ID == 0 || !task.CreatedAt.Equal(at(0)) {
		t.Fatalf("created %+v", task)
	}
	got, err := st.ClaimTasks(ctx, "lc-src", at(1), 10, 15*time.Second)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with the destination unknown: %v %v", got, err)
	}
	if _, err := st.MarkRunning(ctx, task.TaskID, "lc-src", at(1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("running before dispatch: %v, want ErrConflict", err)
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: task.TaskID, AgentUID: "lc-src", ReportID: "r0", State: store.TaskSucceeded}, at(1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("report before dispatch: %v, want ErrConflict", err)
	}
	beat(t, st, "lc-dst", "lc-n2", at(2))
	got, err = st.ClaimTasks(ctx, "lc-src", at(3), 10, 15*time.Second)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	d := got[0]
	if d.State != store.TaskDispatched || d.DispatchedAt == nil || !d.DispatchedAt.Equal(at(3)) || d.Deadline == nil || !d.Deadline.Equal(at(3+20+15)) {
		t.Errorf("dispatched %+v", d)
	}
	if again, _ := st.ClaimTasks(ctx, "lc-src", at(3.5), 10, 15*time.Second); len(again) != 0 {
		t.Errorf("claimed twice: %v", again)
	}
	if _, err := st.MarkRunning(ctx, task.TaskID, "lc-dst", at(4)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another agent marks it running: %v, want ErrNotFound", err)
	}
	r, err := st.MarkRunning(ctx, task.TaskID, "lc-src", at(4))
	if err != nil || r.State != store.TaskRunning || !r.StartedAt.Equal(at(4)) {
		t.Fatalf("running: %+v %v", r, err)
	}
	if r2, err := st.MarkRunning(ctx, task.TaskID, "lc-src", at(5)); err != nil || !r2.StartedAt.Equal(at(4)) {
		t.Errorf("running again is a no-op: %+v %v", r2, err)
	}
	res := json.RawMessage(`{"kind":"ping","rtt_ms":{"avg":0.091}}`)
	done, dup, err := st.Complete(ctx, store.Report{TaskID: task.TaskID, AgentUID: "lc-src", ReportID: "r1", State: store.TaskSucceeded, RawResult: "PING ...", Result: res}, at(9))
	if err != nil || dup {
		t.Fatalf("complete: %v dup=%v", err, dup)
	}
	if done.State != store.TaskSucceeded || done.RawResult != "PING ..." || !done.FinishedAt.Equal(at(9)) || !done.UpdatedAt.Equal(at(9)) || done.ReportID != "r1" {
		t.Errorf("completed %+v", done)
	}
	var parsed map[string]any
	if err := json.Unmarshal(done.Result, &parsed); err != nil || parsed["kind"] != "ping" {
		t.Errorf("result %s: %v", done.Result, err)
	}
	stored, err := st.GetTask(ctx, task.TaskID)
	if err != nil || stored.State != store.TaskSucceeded || !stored.CreatedAt.Equal(at(0)) || !stored.DispatchedAt.Equal(at(3)) || !stored.StartedAt.Equal(at(4)) {
		t.Errorf("stored %+v %v", stored, err)
	}
	if _, err := st.Cancel(ctx, task.TaskID, "", at(10)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("cancel a finished task: %v, want ErrConflict", err)
	}
	if _, err := st.GetTask(ctx, "no-such-task"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	// A pending task cancelled: never handed out.
	c := create(t, st, mkTask("lc-src", "lc-dst", "ping"))[0]
	cc, err := st.Cancel(ctx, c.TaskID, "", at(11))
	if err != nil || cc.State != store.TaskCancelled || cc.Reason != store.ReasonCancelled {
		t.Errorf("cancel pending: %+v %v", cc, err)
	}
	if got, _ := st.ClaimTasks(ctx, "lc-src", at(12), 10, 0); len(got) != 0 {
		t.Errorf("cancelled task claimed: %v", got)
	}
	// Listing and paging.
	page, total, err := st.ListTasks(ctx, store.TaskFilter{AgentUID: "lc-src"}, store.Page{Limit: 1})
	if err != nil || total != 2 || len(page) != 1 || page[0].TaskID != task.TaskID {
		t.Fatalf("page 1: %v total %d %v", page, total, err)
	}
	page2, _, _ := st.ListTasks(ctx, store.TaskFilter{AgentUID: "lc-src"}, store.Page{Limit: 1, AfterID: page[0].ID})
	if len(page2) != 1 || page2[0].TaskID != c.TaskID {
		t.Errorf("page 2: %v", page2)
	}
	if _, _, err := st.ListTasks(ctx, store.TaskFilter{State: "bogus"}, store.Page{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unknown state filter: %v", err)
	}
}

func testAtomicCreate(t *testing.T, st store.Store) {
	ctx := context.Background()
	_, before, _ := st.ListTasks(ctx, store.TaskFilter{}, store.Page{Limit: 1})
	bad := mkTask("at-src", "", "ping")
	_, err := st.CreateTasks(ctx, "", []store.Task{mkTask("at-src", "at-dst", "ping"), bad}, at(0))
	wantErr(t, "task without destination", err, store.ErrInvalid)
	dupID := mkTask("at-src", "at-dst", "ping")
	dupID.TaskID = "fixed-id"
	_, err = st.CreateTasks(ctx, "", []store.Task{dupID, dupID}, at(0))
	wantErr(t, "duplicate task id", err, store.ErrConflict)
	badSpec := mkTask("at-src", "at-dst", "probe")
	badSpec.Spec = json.RawMessage(`{"kind":`)
	_, err = st.CreateTasks(ctx, "", []store.Task{mkTask("at-src", "at-dst", "ping"), badSpec}, at(0))
	wantErr(t, "malformed spec", err, store.ErrInvalid)
	_, err = st.CreateTasks(ctx, "no-such-run", []store.Task{mkTask("at-src", "at-dst", "ping")}, at(0))
	wantErr(t, "unknown run", err, store.ErrNotFound)
	_, after, _ := st.ListTasks(ctx, store.TaskFilter{}, store.Page{Limit: 1})
	if after != before {
		t.Errorf("%d tasks stored by refused calls", after-before)
	}
}

func testDedupe(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "dd-src", "dd-n1", at(0))
	beat(t, st, "dd-dst", "dd-n2", at(0))
	task := create(t, st, mkTask("dd-src", "dd-dst", "ping"))[0]
	if _, err := st.ClaimTasks(ctx, "dd-src", at(1), 10, time.Second); err != nil {
		t.Fatal(err)
	}
	rep := store.Report{TaskID: task.TaskID, AgentUID: "dd-src", ReportID: "rep-a", State: store.TaskFailed, Reason: "exit 2", RawResult: "first"}
	cases := []struct {
		name    string
		rep     store.Report
		wantDup bool
		wantErr error
	}{
		{"first", rep, false, nil},
		{"same report again", rep, true, nil},
		{"same report id, other text", func() store.Report { r := rep; r.RawResult = "second"; return r }(), true, nil},
		{"other report id", func() store.Report { r := rep; r.ReportID = "rep-b"; return r }(), false, store.ErrConflict},
		{"other agent", func() store.Report { r := rep; r.AgentUID = "dd-dst"; r.ReportID = "rep-c"; return r }(), false, store.ErrNotFound},
		{"no report id", func() store.Report { r := rep; r.ReportID = ""; return r }(), false, store.ErrInvalid},
		{"not final", func() store.Report { r := rep; r.State = store.TaskRunning; return r }(), false, store.ErrInvalid},
	}
	for _, c := range cases {
		got, dup, err := st.Complete(ctx, c.rep, at(5))
		if c.wantErr != nil {
			wantErr(t, c.name, err, c.wantErr)
			continue
		}
		if err != nil || dup != c.wantDup || got.RawResult != "first" || got.State != store.TaskFailed || got.Reason != "exit 2" {
			t.Errorf("%s: %+v dup=%v %v", c.name, got, dup, err)
		}
	}
}

func testConcurrentClaims(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "cc-src", "cc-n1", at(0))
	beat(t, st, "cc-dst", "cc-n2", at(0))
	const n = 60
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = mkTask("cc-src", "cc-dst", "ping")
	}
	create(t, st, tasks...)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				got, err := st.ClaimTasks(ctx, "cc-src", at(1), 7, time.Second)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				for _, g := range got {
					seen[g.TaskID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d of %d tasks claimed", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("task %s claimed %d times", id, c)
		}
	}
}

func testExclusive(t *testing.T, st store.Store) {
	ctx := context.Background()
	// Two sources on nodes ex-1 and ex-2, both measuring toward ex-3.
	beat(t, st, "ex-a", "ex-1", at(0))
	beat(t, st, "ex-b", "ex-2", at(0))
	beat(t, st, "ex-c", "ex-3", at(0))
	beat(t, st, "ex-d", "ex-4", at(0))
	excl := func(src, dst string) store.Task {
		tk := mkTask(src, dst, "iperf3")
		tk.Exclusive = true
		return tk
	}
	ts := create(t, st, excl("ex-a", "ex-c"), excl("ex-b", "ex-c"), mkTask("ex-b", "ex-c", "ping"), excl("ex-b", "ex-d"))
	a, _ := st.ClaimTasks(ctx, "ex-a", at(1), 10, time.Second)
	b, _ := st.ClaimTasks(ctx, "ex-b", at(1), 10, time.Second)
	got := map[string]bool{}
	for _, x := range append(a, b...) {
		got[x.TaskID] = true
	}
	// a→c runs; b→c waits (node ex-3 busy); the ping is not exclusive;
	// b→d shares no node with a→c.
	want := map[string]bool{ts[0].TaskID: true, ts[2].TaskID: true, ts[3].TaskID: true}
	if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
		t.Fatalf("claimed %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "ex-a", ReportID: "x", State: store.TaskSucceeded}, at(2)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[3].TaskID, AgentUID: "ex-b", ReportID: "y", State: store.TaskSucceeded}, at(2)); err != nil {
		t.Fatal(err)
	}
	b, _ = st.ClaimTasks(ctx, "ex-b", at(3), 10, time.Second)
	if len(b) != 1 || b[0].TaskID != ts[1].TaskID {
		t.Errorf("after the node freed: %v", b)
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func testOfflineAndDeadlines(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "od-src", "od-n1", at(0))
	beat(t, st, "od-dst", "od-n2", at(0))
	ts := create(t, st, mkTask("od-src", "od-dst", "ping"), mkTask("od-src", "od-dst", "ping"), mkTask("od-src", "od-dst", "ping"))
	got, _ := st.ClaimTasks(ctx, "od-src", at(1), 2, 5*time.Second) // deadline 1+20+5 = 26 s
	if len(got) != 2 {
		t.Fatalf("claimed %d", len(got))
	}
	if _, err := st.MarkRunning(ctx, got[0].TaskID, "od-src", at(2)); err != nil {
		t.Fatal(err)
	}
	// ExpireDeadlines works on the whole database: look at this test's
	// tasks only.
	exp, err := st.ExpireDeadlines(ctx, at(26))
	if mine := ofSource(exp, "od-src"); err != nil || len(mine) != 0 {
		t.Errorf("expired at the deadline itself: %d tasks (%v)", len(mine), err)
	}
	exp, err = st.ExpireDeadlines(ctx, at(26.001))
	mine := ofSource(exp, "od-src")
	if err != nil || len(mine) != 2 {
		t.Fatalf("expired after the deadline: %d tasks (%v), want 2", len(mine), err)
	}
	for _, e := range mine {
		if e.State != store.TaskTimedOut || e.Reason != store.ReasonDeadlinePassed || !e.FinishedAt.Equal(at(26.001)) {
			t.Errorf("expired task %s: %s %q finished %v", e.TaskID, e.State, e.Reason, e.FinishedAt)
		}
	}
	// The third is claimed, then its agent goes offline.
	got, _ = st.ClaimTasks(ctx, "od-src", at(27), 2, 5*time.Second)
	if len(got) != 1 || got[0].TaskID != ts[2].TaskID {
		t.Fatalf("third claim: %v", got)
	}
	failed, err := st.FailAgentTasks(ctx, "od-src", "", at(40))
	if err != nil || len(failed) != 1 || failed[0].State != store.TaskFailed || failed[0].Reason != store.ReasonAgentOffline {
		t.Errorf("fail agent tasks: %d tasks (%v)", len(failed), err)
	}
	if again, _ := st.FailAgentTasks(ctx, "od-src", "", at(41)); len(again) != 0 {
		t.Errorf("failed twice: %v", again)
	}
}

func ofSource(ts []store.Task, src string) []store.Task {
	var out []store.Task
	for _, t := range ts {
		if t.SrcPodUID == src {
			out = append(out, t)
		}
	}
	return out
}

func testRuns(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "ru-src", "ru-n1", at(0))
	beat(t, st, "ru-dst", "ru-n2", at(0))
	run, ts, err := st.CreateRun(ctx, store.Run{Suite: "baseline", Params: json.RawMessage(`{"repeat":1}`)},
		[]store.Task{mkTask("ru-src", "ru-dst", "probe"), mkTask("ru-src", "ru-dst", "probe")}, at(0))
	if err != nil || run.State != store.RunRunning || len(ts) != 2 || ts[0].RunID != run.ID || run.Counts[store.TaskPending] != 2 {
		t.Fatalf("create run: %+v %v %v", run, ts, err)
	}
	if _, _, err := st.CreateRun(ctx, store.Run{Suite: "x"}, []store.Task{mkTask("ru-src", "", "probe")}, at(0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("run with a bad task: %v", err)
	}
	if runs, _, _ := st.ListRuns(ctx, store.RunFilter{Suite: "x"}, store.Page{}); len(runs) != 0 {
		t.Errorf("half-made run stored: %v", runs)
	}
	claimed, _ := st.ClaimTasks(ctx, "ru-src", at(1), 10, time.Second)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d", len(claimed))
	}
	_, _, _ = st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "ru-src", ReportID: "1", State: store.TaskSucceeded}, at(2))
	mid, _ := st.GetRun(ctx, run.ID)
	if mid.State != store.RunRunning || mid.Counts[store.TaskSucceeded] != 1 || mid.Counts[store.TaskDispatched] != 1 {
		t.Errorf("run midway: %+v", mid)
	}
	_, _, _ = st.Complete(ctx, store.Report{TaskID: ts[1].TaskID, AgentUID: "ru-src", ReportID: "2", State: store.TaskFailed, Reason: "x"}, at(3))
	end, _ := st.GetRun(ctx, run.ID)
	if end.State != store.RunFailed || end.FinishedAt == nil || !end.FinishedAt.Equal(at(3)) {
		t.Errorf("run at the end: %+v", end)
	}
	if _, err := st.CancelRun(ctx, run.ID, "", at(4)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("cancel a finished run: %v", err)
	}
	run2, ts2, _ := st.CreateRun(ctx, store.Run{Suite: "baseline"}, []store.Task{mkTask("ru-src", "ru-dst", "probe"), mkTask("ru-src", "ru-dst", "probe")}, at(5))
	_, _ = st.ClaimTasks(ctx, "ru-src", at(6), 1, time.Second)
	c, err := st.CancelRun(ctx, run2.ID, "enough", at(7))
	if err != nil || c.State != store.RunCancelled || c.Counts[store.TaskCancelled] != 2 {
		t.Errorf("cancel run: %+v %v", c, err)
	}
	for _, tk := range ts2 {
		got, _ := st.GetTask(ctx, tk.TaskID)
		if got.State != store.TaskCancelled || got.Reason != "enough" {
			t.Errorf("task of cancelled run: %s %q", got.State, got.Reason)
		}
	}
	runs, total, err := st.ListRuns(ctx, store.RunFilter{Suite: "baseline"}, store.Page{Limit: 1})
	if err != nil || total != 2 || len(runs) != 1 || runs[0].ID != run.ID {
		t.Errorf("list runs: %v %d %v", runs, total, err)
	}
}

// testRestart closes the store with tasks dispatched and running and
// opens it again: every task is still there in its state, results
// reported before are kept, and the retried reports are recognised.
func testRestart(t *testing.T, dsn string, st store.Store) {
	ctx := context.Background()
	beat(t, st, "rs-src", "rs-n1", at(0))
	beat(t, st, "rs-dst", "rs-n2", at(0))
	ts := create(t, st, mkTask("rs-src", "rs-dst", "ping"), mkTask("rs-src", "rs-dst", "ping"), mkTask("rs-src", "rs-dst", "ping"), mkTask("rs-src", "rs-dst", "ping"))
	got, _ := st.ClaimTasks(ctx, "rs-src", at(1), 3, time.Minute)
	if len(got) != 3 {
		t.Fatalf("claimed %d", len(got))
	}
	_, _ = st.MarkRunning(ctx, ts[1].TaskID, "rs-src", at(2))
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "rs-src", ReportID: "r0", State: store.TaskSucceeded, RawResult: "zero"}, at(3)); err != nil {
		t.Fatal(err)
	}

	// The server stops (its store closes) and starts again on the same
	// database.
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	st2 := Open(t, dsn)
	want := map[string]store.TaskState{ts[0].TaskID: store.TaskSucceeded, ts[1].TaskID: store.TaskRunning, ts[2].TaskID: store.TaskDispatched, ts[3].TaskID: store.TaskPending}
	for id, state := range want {
		g, err := st2.GetTask(ctx, id)
		if err != nil || g.State != state {
			t.Errorf("after reopen: task %s %s (%v), want %s", id, g.State, err, state)
		}
	}
	reports := []struct {
		rep     store.Report
		wantDup bool
	}{
		{store.Report{TaskID: ts[0].TaskID, AgentUID: "rs-src", ReportID: "r0", State: store.TaskSucceeded, RawResult: "zero"}, true},
		{store.Report{TaskID: ts[1].TaskID, AgentUID: "rs-src", ReportID: "r1", State: store.TaskSucceeded, RawResult: "one"}, false},
		{store.Report{TaskID: ts[1].TaskID, AgentUID: "rs-src", ReportID: "r1", State: store.TaskSucceeded, RawResult: "one"}, true},
		{store.Report{TaskID: ts[2].TaskID, AgentUID: "rs-src", ReportID: "r2", State: store.TaskFailed, Reason: "exit 1"}, false},
	}
	for i, r := range reports {
		_, dup, err := st2.Complete(ctx, r.rep, at(10))
		if err != nil || dup != r.wantDup {
			t.Errorf("report %d after reopen: dup=%v err=%v, want dup=%v", i, dup, err, r.wantDup)
		}
	}
	more, _ := st2.ClaimTasks(ctx, "rs-src", at(11), 10, time.Minute)
	if len(more) != 1 || more[0].TaskID != ts[3].TaskID {
		t.Errorf("claims after reopen: %v (only the pending task may come out)", more)
	}
	list, total, _ := st2.ListTasks(ctx, store.TaskFilter{AgentUID: "rs-src"}, store.Page{})
	if total != 4 {
		t.Errorf("%d tasks after reopen, want 4", total)
	}
	results := map[string]string{}
	for _, l := range list {
		results[l.TaskID] = l.RawResult
	}
	if results[ts[0].TaskID] != "zero" || results[ts[1].TaskID] != "one" {
		t.Errorf("results after reopen: %v", results)
	}
}
