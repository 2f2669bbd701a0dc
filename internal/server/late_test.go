package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestLateResultIsStored: an agent away long enough to be offline has its
// task failed "agent went offline"; the result it delivers when it comes
// back is stored (not refused with 409), the task says it was late, and
// its run is judged again.
func TestLateResultIsStored(t *testing.T) { storetest.ForEach(t, testLateResultIsStored) }

func testLateResultIsStored(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	runID, id := f.dispatchedRunTask()
	// Agent a is away (a partition, a server restart) for 12 s.
	for range 4 {
		f.clock.Add(3 * time.Second)
		f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
		if _, err := f.srv.Reap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if tk, _ := f.user.GetTask(ctx, id); tk.State != api.StateFailed || tk.Reason != store.ReasonAgentOffline {
		t.Fatalf("task of the absent agent: %s %q, want failed %q", tk.State, tk.Reason, store.ReasonAgentOffline)
	}
	// It comes back with the result it finished meanwhile.
	res, _ := json.Marshal(probe.Result{Kind: "ping", RTTms: &probe.Summary{Avg: 0.05, Count: 5}})
	rep := api.Report{TaskID: id, PodUID: "uid-a", ReportID: "r-late", State: api.StateSucceeded, Result: res, TaskResult: "5 packets"}
	reply, err := f.agent.Report(ctx, rep)
	if err != nil {
		t.Fatalf("late result refused: %v", err)
	}
	if reply.State != api.StateSucceeded || reply.Duplicate {
		t.Errorf("reply %+v, want succeeded, not a duplicate", reply)
	}
	tk, err := f.user.GetTask(ctx, id)
	if err != nil || tk.State != api.StateSucceeded || tk.LateReason != store.ReasonAgentOffline || tk.RawSize != 9 {
		t.Errorf("task after its late result: %s late %q raw %d (%v)", tk.State, tk.LateReason, tk.RawSize, err)
	}
	v1, _ := f.user.Task(ctx, id)
	if v1.TaskResult != "5 packets" || v1.TaskLateReason != store.ReasonAgentOffline {
		t.Errorf("v1 task: result %q late %q", v1.TaskResult, v1.TaskLateReason)
	}
	if r, _ := f.user.GetRun(ctx, runID); r.State != api.RunSucceeded {
		t.Errorf("run after the late result: %s, want succeeded", r.State)
	}
	// Delivered again (the agent did not see the answer): a duplicate.
	if reply, err := f.agent.Report(ctx, rep); err != nil || !reply.Duplicate {
		t.Errorf("again: %+v %v, want a duplicate", reply, err)
	}
}
