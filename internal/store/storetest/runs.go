package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

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
	// A run ID that exists is a conflict, and its tasks are not stored.
	if _, _, err := st.CreateRun(ctx, store.Run{ID: run.ID, Suite: "x"}, []store.Task{mkTask("ru-src", "ru-dst", "probe")}, at(0)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("run with an existing ID: %v, want ErrConflict", err)
	}
	if _, n, _ := st.ListTasks(ctx, store.TaskFilter{AgentUID: "ru-src"}, store.Page{}); n != 2 {
		t.Errorf("%d tasks of ru-src after a refused run, want 2", n)
	}
	if got, err := st.GetRun(ctx, run.ID); err != nil || got.Seq != run.Seq || got.Suite != "baseline" || got.Counts[store.TaskPending] != 2 {
		t.Errorf("run read back: %+v, %v; want seq %d, suite baseline, 2 pending", got, err, run.Seq)
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

// testConcurrentRunEnd: the last two tasks of a run reported at the same
// moment (two agents, or two server replicas, storing reports side by
// side) finish the run. Each transaction sees the other's task still open
// when it looks; the store must look again after the commit, or the run
// stays running with every task done. A report the store refuses with an
// error (MySQL aborts one of the two as a deadlock) is delivered again, as
// agents do.
func testConcurrentRunEnd(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "ce-src", "ce-n1", at(0))
	beat(t, st, "ce-dst", "ce-n2", at(0))
	const rounds = 100
	stuck := 0
	var retried atomic.Int32
	for round := range rounds {
		run, ts, err := st.CreateRun(ctx, store.Run{Suite: "ce"}, []store.Task{mkTask("ce-src", "ce-dst", "probe"), mkTask("ce-src", "ce-dst", "probe")}, at(0))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := st.ClaimTasks(ctx, "ce-src", at(1), 10, time.Second); err != nil || len(got) != 2 {
			t.Fatalf("claim: %d %v", len(got), err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, tk := range ts {
			wg.Go(func() {
				<-start
				rep := store.Report{TaskID: tk.TaskID, AgentUID: "ce-src", ReportID: fmt.Sprintf("ce-%d-%d", round, i), State: store.TaskSucceeded}
				for attempt := 0; ; attempt++ {
					_, _, err := st.Complete(ctx, rep, at(2))
					if err == nil {
						return
					}
					if attempt == 4 {
						t.Errorf("complete, 5 times: %v", err)
						return
					}
					retried.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		close(start)
		wg.Wait()
		end, err := st.GetRun(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if end.State != store.RunSucceeded {
			stuck++
			if stuck == 1 {
				t.Errorf("run %s is %s with its tasks %v", run.ID, end.State, end.Counts)
			}
		}
	}
	t.Logf("%d runs ended by two reports at once; reports delivered again after an error: %d", rounds, retried.Load())
	if stuck > 0 {
		t.Errorf("%d of %d runs whose last two tasks ended at once were left running", stuck, rounds)
	}
}
