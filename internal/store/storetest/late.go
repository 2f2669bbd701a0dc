package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testLateResults: a result that arrives after the server ended its task
// for the agent's absence (failed "agent went offline", timed out
// "deadline passed") is stored, with the reason it was ended with, and its
// run is judged again; a result for a task ended otherwise still
// conflicts; a cancelled report for an ended task changes no outcome. Times
// lie before every other subtest's (ExpireDeadlines works on the whole
// database).
func testLateResults(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "late-src", "late-n1", at(-7100))
	beat(t, st, "late-dst", "late-n2", at(-7100))
	t.Cleanup(func() { _, _ = st.MarkSilentOffline(ctx, at(-5000), at(-5000)) })
	run, ts, err := st.CreateRun(ctx, store.Run{Suite: "tasks"}, []store.Task{
		mkTask("late-src", "late-dst", "ping"), mkTask("late-src", "late-dst", "ping"),
	}, at(-7100))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ClaimTasks(ctx, "late-src", at(-7090), 2, 0); err != nil || len(got) != 2 {
		t.Fatalf("claim: %d (%v)", len(got), err)
	}
	if failed, err := st.FailAgentTasks(ctx, "late-src", "", at(-7080)); err != nil || len(failed) != 2 {
		t.Fatalf("fail agent tasks: %d (%v)", len(failed), err)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.State != store.RunFailed {
		t.Fatalf("run with its tasks failed: %s", r.State)
	}
	report := func(taskID, reportID string, state store.TaskState, raw string) store.Report {
		return store.Report{TaskID: taskID, AgentUID: "late-src", ReportID: reportID, State: state, RawResult: raw, Result: []byte(`{"kind":"ping"}`)}
	}
	// The first late result: stored and marked; the run stays failed (its
	// other task is still failed).
	got, dup, err := st.Complete(ctx, report(ts[0].TaskID, "late-r0", store.TaskSucceeded, "out 0"), at(-7070))
	if err != nil || dup {
		t.Fatalf("late result: dup %v err %v", dup, err)
	}
	if got.State != store.TaskSucceeded || got.LateReason != store.ReasonAgentOffline || got.Reason != "" || got.RawSize != 5 || got.ReportID != "late-r0" {
		t.Errorf("task after its late result: %s reason %q late %q raw %d report %q", got.State, got.Reason, got.LateReason, got.RawSize, got.ReportID)
	}
	if out, err := st.TaskOutput(ctx, ts[0].TaskID); err != nil || out != "out 0" {
		t.Errorf("late output %q (%v)", out, err)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.State != store.RunFailed {
		t.Errorf("run with one task still failed: %s, want failed", r.State)
	}
	// Again: a duplicate; another result now: a conflict.
	if _, dup, err := st.Complete(ctx, report(ts[0].TaskID, "late-r0", store.TaskSucceeded, "out 0"), at(-7069)); err != nil || !dup {
		t.Errorf("the late result again: dup %v err %v", dup, err)
	}
	if _, _, err := st.Complete(ctx, report(ts[0].TaskID, "late-other", store.TaskFailed, "x"), at(-7069)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a second, different late result: %v, want conflict", err)
	}
	// The second: every task succeeded, so the run did.
	if _, _, err := st.Complete(ctx, report(ts[1].TaskID, "late-r1", store.TaskSucceeded, ""), at(-7060)); err != nil {
		t.Fatal(err)
	}
	if r, _ := st.GetRun(ctx, run.ID); r.State != store.RunSucceeded || r.FinishedAt == nil {
		t.Errorf("run with every late result in: %s finished %v, want succeeded", r.State, r.FinishedAt)
	}

	// A task timed out for silence takes its late result too.
	more := create(t, st, mkTask("late-src", "late-dst", "ping"), mkTask("late-src", "late-dst", "ping"))
	if got, err := st.ClaimTasks(ctx, "late-src", at(-7050), 2, 0); err != nil || len(got) != 2 {
		t.Fatalf("claim: %d (%v)", len(got), err)
	}
	exp, err := st.ExpireDeadlines(ctx, at(-7050).Add(mkTask("", "", "").Timeout+time.Second))
	if err != nil || len(ofSource(exp, "late-src")) != 2 {
		t.Fatalf("expire: %d (%v)", len(ofSource(exp, "late-src")), err)
	}
	got, _, err = st.Complete(ctx, report(more[0].TaskID, "late-r2", store.TaskFailed, ""), at(-7000))
	if err != nil || got.State != store.TaskFailed || got.LateReason != store.ReasonDeadlinePassed {
		t.Errorf("late result of a timed-out task: %s late %q (%v)", got.State, got.LateReason, err)
	}
	// A cancelled report for an ended task is only the agent's
	// acknowledgement (testStopAcks): the outcome stays.
	got, _, err = st.Complete(ctx, report(more[1].TaskID, "late-c", store.TaskCancelled, ""), at(-7000))
	if err != nil || got.State != store.TaskTimedOut || got.ReportID != "" || got.StoppedAt == nil {
		t.Errorf("cancelled report for a timed-out task: %s report %q stopped_at %v (%v), want timed_out untouched, stopped", got.State, got.ReportID, got.StoppedAt, err)
	}

	// A task ended for another reason (cancelled by its user) refuses it.
	user := create(t, st, mkTask("late-src", "late-dst", "ping"))
	if got, err := st.ClaimTasks(ctx, "late-src", at(-6990), 1, 0); err != nil || len(got) != 1 {
		t.Fatalf("claim: %d (%v)", len(got), err)
	}
	if _, err := st.Cancel(ctx, user[0].TaskID, "", at(-6980)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Complete(ctx, report(user[0].TaskID, "late-u", store.TaskSucceeded, ""), at(-6970)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("result for a task its user cancelled: %v, want conflict", err)
	}
}
