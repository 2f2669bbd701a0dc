package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestTasksOfGoneAgentsEnd: tasks waiting for an agent that went away and
// stays away end failed with the agent and the time in the reason, and
// their run ends, so it no longer counts as in flight. The source's tasks
// and the destination's both wait on it.
func TestTasksOfGoneAgentsEnd(t *testing.T) { storetest.ForEach(t, testTasksOfGoneAgentsEnd) }

func testTasksOfGoneAgentsEnd(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "uid-a", Dst: "uid-b", Spec: &probe.Spec{Kind: "ping"}}, // waits for b as its destination
		{Src: "uid-b", Dst: "uid-a", Spec: &probe.Spec{Kind: "ping"}}, // waits for b as its source
	}})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	bLast := f.clock.Now()
	// Agent b goes silent; a keeps beating. b is offline after 10 s, and
	// gone 10 s after that; until then its tasks wait for it.
	for i := range 7 {
		f.clock.Add(3 * time.Second)
		f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
		res, err := f.srv.Reap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		silent := f.clock.Now().Sub(bLast)
		switch {
		case silent <= 2*DefaultOfflineAfter && len(res.Gone) != 0:
			t.Fatalf("pass %d: b silent %s: %d tasks failed as gone, want 0", i, silent, len(res.Gone))
		case silent > 2*DefaultOfflineAfter && len(res.Gone) != 0 && len(res.Gone) != 3:
			t.Fatalf("pass %d: %d tasks failed as gone, want all 3 at once", i, len(res.Gone))
		}
	}
	got, err := f.user.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.RunFailed || got.Counts["failed"] != 2 {
		t.Fatalf("run after its agent is gone: state %s counts %v, want failed with 2 failed", got.State, got.Counts)
	}
	want := "agent uid-b offline since " + bLast.UTC().Truncate(time.Second).Format(time.RFC3339)
	for _, tk := range got.Tasks {
		if tk.State != api.StateFailed || tk.Reason != want {
			t.Errorf("run task %s: %s %q, want failed %q", tk.TaskID, tk.State, tk.Reason, want)
		}
	}
	v1, err := f.user.Task(ctx, ids[0])
	if err != nil || v1.TaskStatus != api.TaskStatusFailed || !strings.HasPrefix(v1.TaskReason, "agent uid-b offline since ") {
		t.Errorf("v1 task: status %d reason %q (%v), want failed for uid-b", v1.TaskStatus, v1.TaskReason, err)
	}
}
