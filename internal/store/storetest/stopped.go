package storetest

import (
	"context"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testStopAcks: the agent's cancelled report for a task the server had
// cancelled is its acknowledgement that it stopped the task (and removed
// its set-up): the first records StoppedAt and the agent's reason and
// leaves the outcome as it was; later ones, under any report id, write
// nothing. A cancelled report that is the task's own result (the agent
// stopping by itself) sets StoppedAt too.
func testStopAcks(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "stop-src", "stop-n1", at(100))
	beat(t, st, "stop-dst", "stop-n2", at(100))
	_, ts, err := st.CreateRun(ctx, store.Run{Suite: "hold"}, []store.Task{
		mkTask("stop-src", "stop-dst", "ping"), mkTask("stop-src", "stop-dst", "ping"),
	}, at(100))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ClaimTasks(ctx, "stop-src", at(101), 2, 0); err != nil || len(got) != 2 {
		t.Fatalf("claim: %d (%v)", len(got), err)
	}
	for _, x := range ts {
		if _, err := st.MarkRunning(ctx, x.TaskID, "stop-src", at(102)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Cancel(ctx, ts[0].TaskID, "phase done", at(103)); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetTask(ctx, ts[0].TaskID); got.StoppedAt != nil || got.StopReason != "" {
		t.Errorf("cancelled, not yet acknowledged: stopped_at %v reason %q, want none", got.StoppedAt, got.StopReason)
	}
	ack := store.Report{TaskID: ts[0].TaskID, AgentUID: "stop-src", ReportID: "ack-1", State: store.TaskCancelled,
		Reason: "cancelled by the server", Result: []byte(`{"notes":["held"]}`)}
	got, dup, err := st.Complete(ctx, ack, at(104.5))
	switch {
	case err != nil || dup:
		t.Errorf("first acknowledgement: dup %v (%v), want stored", dup, err)
	case got.StoppedAt == nil || !got.StoppedAt.Equal(at(104.5)) || got.StopReason != ack.Reason:
		t.Errorf("first acknowledgement: stopped_at %v reason %q, want %v %q", got.StoppedAt, got.StopReason, at(104.5), ack.Reason)
	case got.State != store.TaskCancelled || got.Reason != "phase done" || got.ReportID != "" || got.Result != nil || !got.FinishedAt.Equal(at(103)):
		t.Errorf("first acknowledgement changed the outcome: %s %q report %q result %s finished %v", got.State, got.Reason, got.ReportID, got.Result, got.FinishedAt)
	}
	if read, err := st.GetTask(ctx, ts[0].TaskID); err != nil || read.StoppedAt == nil || !read.StoppedAt.Equal(at(104.5)) {
		t.Errorf("read back: stopped_at %v (%v)", read.StoppedAt, err)
	}
	for _, again := range []string{"ack-1", "ack-2"} {
		ack.ReportID, ack.Reason = again, "again"
		got, dup, err := st.Complete(ctx, ack, at(106))
		if err != nil || !dup || got.StoppedAt == nil || !got.StoppedAt.Equal(at(104.5)) || got.StopReason != "cancelled by the server" {
			t.Errorf("acknowledgement %s again: dup %v stopped_at %v reason %q (%v), want a duplicate, the first kept", again, dup, got.StoppedAt, got.StopReason, err)
		}
	}
	_, _, err = st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "stop-src", ReportID: "res", State: store.TaskSucceeded}, at(106))
	wantErr(t, "a result for a cancelled task", err, store.ErrConflict)

	// The agent stops the other task by itself (shutting down).
	got, dup, err = st.Complete(ctx, store.Report{TaskID: ts[1].TaskID, AgentUID: "stop-src", ReportID: "own", State: store.TaskCancelled, Reason: "agent shutting down"}, at(107))
	if err != nil || dup || got.State != store.TaskCancelled || got.ReportID != "own" || got.StoppedAt == nil || !got.StoppedAt.Equal(at(107)) {
		t.Errorf("the agent's own cancellation: %s report %q stopped_at %v dup %v (%v)", got.State, got.ReportID, got.StoppedAt, dup, err)
	}
}
