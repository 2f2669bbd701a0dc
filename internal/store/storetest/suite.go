package storetest

import (
	"context"
	"errors"
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
	return OpenWith(t, func(ctx context.Context) (store.Store, error) { return store.Open(ctx, dsn) })
}

// OpenWith opens a store with open, within 30 s, and closes it when the
// test ends.
func OpenWith(t *testing.T, open func(context.Context) (store.Store, error)) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := open(ctx)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Run is the conformance suite: every Store must pass it. dsn names a
// fresh, empty database (see ForEach).
func Run(t *testing.T, dsn string) {
	RunWith(t, func(t *testing.T) store.Store { return Open(t, dsn) })
}

// RunWith is Run for the store that open opens on a fresh, empty
// database: open is called once, and once more on the same database by
// the restart test.
func RunWith(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	// Subtests share the database; each uses its own agent uids.
	t.Run("agents", func(t *testing.T) { testAgents(t, st) })
	t.Run("agents by uid", func(t *testing.T) { testGetAgents(t, st) })
	t.Run("many tasks at once", func(t *testing.T) { testManyTasks(t, st) })
	t.Run("register batch", func(t *testing.T) { testRegisterBatch(t, st) })
	t.Run("life cycle", func(t *testing.T) { testLifeCycle(t, st) })
	t.Run("nothing stored half-way", func(t *testing.T) { testAtomicCreate(t, st) })
	t.Run("report dedupe", func(t *testing.T) { testDedupe(t, st) })
	t.Run("concurrent claims", func(t *testing.T) { testConcurrentClaims(t, st) })
	t.Run("exclusive nodes", func(t *testing.T) { testExclusive(t, st) })
	t.Run("claim created tasks", func(t *testing.T) { testClaimCreated(t, st) })
	t.Run("create a run and claim", func(t *testing.T) { testCreateRunAndClaim(t, st) })
	t.Run("create claim: notify and agents", func(t *testing.T) { testCreateClaimNotifyAndAgents(t, st) })
	t.Run("offline and deadlines", func(t *testing.T) { testOfflineAndDeadlines(t, st) })
	t.Run("pending tasks of gone agents", func(t *testing.T) { testGoneAgents(t, st) })
	t.Run("late results", func(t *testing.T) { testLateResults(t, st) })
	t.Run("stop acknowledgements", func(t *testing.T) { testStopAcks(t, st) })
	t.Run("output chunks", func(t *testing.T) { testOutputChunks(t, st) })
	t.Run("runs", func(t *testing.T) { testRuns(t, st) })
	t.Run("runs ended by two writers at once", func(t *testing.T) { testConcurrentRunEnd(t, st) })
	t.Run("paging", func(t *testing.T) { testPaging(t, st) })
	t.Run("write probe", func(t *testing.T) { testCheckWrite(t, st) })
	t.Run("credentials", func(t *testing.T) { testCredentials(t, st) })
	t.Run("leases", func(t *testing.T) { testLeases(t, st) })
	t.Run("presence", func(t *testing.T) { testPresence(t, st) })
	t.Run("schedules", func(t *testing.T) { testSchedules(t, st) })
	t.Run("matrix pairs", func(t *testing.T) { testMatrixPairs(t, st) })
	t.Run("restart with tasks in flight", func(t *testing.T) { testRestart(t, open, st) })
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

// testRestart closes the store with tasks dispatched and running and
// opens it again: every task is still there in its state, results
// reported before are kept, and the retried reports are recognised.
func testRestart(t *testing.T, open func(t *testing.T) store.Store, st store.Store) {
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

	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: 6 * time.Hour, Options: []byte(`{"repeat":1}`)}, at(3))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := st.StartScheduleRun(ctx, sc.ID, sc.NextAt, sc.NextAt.Add(sc.Every), at(4), at(-30))
	if err != nil {
		t.Fatal(err)
	}

	// The server stops (its store closes) and starts again on the same
	// database.
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	st2 := open(t)
	if got, err := st2.GetSchedule(ctx, sc.ID); err != nil || got.Every != sc.Every || !got.NextAt.Equal(sc.NextAt.Add(sc.Every)) {
		t.Errorf("schedule after reopen: %+v, %v", got, err)
	}
	if hist, err := st2.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID}); err != nil || len(hist) != 1 || hist[0].ID != sr.ID || hist[0].State != store.ScheduleRunning {
		t.Errorf("schedule history after reopen: %+v, %v; want the running one", hist, err)
	}
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
		results[l.TaskID], _ = st2.TaskOutput(ctx, l.TaskID)
	}
	if results[ts[0].TaskID] != "zero" || results[ts[1].TaskID] != "one" {
		t.Errorf("results after reopen: %v", results)
	}
}
