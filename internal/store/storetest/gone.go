package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testGoneAgents: pending tasks whose source or destination agent is gone
// (offline, silent since before the cut-off) end failed with the agent and
// the time in the reason, and their run ends; tasks of agents still
// online, silent for less than the cut-off or back online stay pending.
// The times lie before every other subtest's, so that marking agents
// offline here touches this test's agents only.
func testGoneAgents(t *testing.T, st store.Store) {
	ctx := context.Background()
	for _, uid := range []string{"gone-src", "gone-dst", "gone-back", "gone-recent"} {
		beat(t, st, uid, "gone-n1", at(-6000))
	}
	beat(t, st, "gone-recent", "gone-n1", at(-5996))
	beat(t, st, "gone-on", "gone-n2", at(-5900))
	run, ts, err := st.CreateRun(ctx, store.Run{Suite: "tasks"}, []store.Task{
		mkTask("gone-src", "gone-on", "ping"), // its source goes
		mkTask("gone-on", "gone-dst", "ping"), // its destination goes
	}, at(-5999))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := st.CreateTasks(ctx, "", []store.Task{
		mkTask("gone-on", "gone-on", "ping"),
		mkTask("gone-back", "gone-on", "ping"),
		mkTask("gone-recent", "gone-on", "ping"),
	}, at(-5999))
	if err != nil {
		t.Fatal(err)
	}
	mine := func(ts []store.Task) map[string]store.Task {
		m := map[string]store.Task{}
		for _, t := range ts {
			if strings.HasPrefix(t.SrcPodUID, "gone-") {
				m[t.TaskID] = t
			}
		}
		return m
	}
	// Online agents: nothing is gone.
	failed, err := st.FailGoneAgentTasks(ctx, at(-5990), at(-5990))
	if err != nil || len(mine(failed)) != 0 {
		t.Fatalf("with every agent online: failed %d (%v), want 0", len(mine(failed)), err)
	}
	if _, err := st.MarkSilentOffline(ctx, at(-5995), at(-5995)); err != nil {
		t.Fatal(err)
	}
	// gone-back returns before the reaper looks.
	beat(t, st, "gone-back", "gone-n1", at(-5994))
	failed, err = st.FailGoneAgentTasks(ctx, at(-5998), at(-5990))
	if err != nil {
		t.Fatal(err)
	}
	got := mine(failed)
	if len(got) != 2 {
		t.Fatalf("failed %d tasks, want the run's 2: %v", len(got), got)
	}
	for i, want := range []string{"agent gone-src offline since ", "agent gone-dst offline since "} {
		f, ok := got[ts[i].TaskID]
		if !ok {
			t.Fatalf("task %d (%s) not failed", i, ts[i].TaskID)
		}
		if f.State != store.TaskFailed || !strings.HasPrefix(f.Reason, want) || f.FinishedAt == nil || !f.FinishedAt.Equal(at(-5990)) {
			t.Errorf("task %d: %s %q finished %v, want failed %q...", i, f.State, f.Reason, f.FinishedAt, want)
		}
		if want := store.ReasonAgentGone(f.SrcPodUID, at(-6000)); i == 0 && f.Reason != want {
			t.Errorf("task 0's reason %q, want %q", f.Reason, want)
		}
	}
	r, err := st.GetRun(ctx, run.ID)
	if err != nil || r.State != store.RunFailed || r.FinishedAt == nil {
		t.Errorf("run after its tasks failed: %+v (%v), want failed and finished", r, err)
	}
	for i, k := range kept {
		g, err := st.GetTask(ctx, k.TaskID)
		if err != nil || g.State != store.TaskPending {
			t.Errorf("kept task %d (%s -> %s): %s %q (%v), want pending", i, k.SrcPodUID, k.DstPodUID, g.State, g.Reason, err)
		}
	}
	// Leave no agent online for the subtests that list who goes offline.
	t.Cleanup(func() { _, _ = st.MarkSilentOffline(ctx, at(-5000), at(-5000)) })
	// Once failed, not again.
	if again, err := st.FailGoneAgentTasks(ctx, at(-5998), at(-5989)); err != nil || len(mine(again)) != 0 {
		t.Errorf("second pass failed %d (%v), want 0", len(mine(again)), err)
	}
}
