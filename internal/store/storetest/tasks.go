package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

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
	if raw, err := st.TaskOutput(ctx, task.TaskID); raw != "PING ..." || err != nil {
		t.Errorf("output %q %v, want the raw output stored apart", raw, err)
	}
	if _, err := st.TaskOutput(ctx, "no-such-task"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("output of an unknown task: %v, want ErrNotFound", err)
	}
	if done.State != store.TaskSucceeded || done.RawSize != int64(len("PING ...")) || !done.FinishedAt.Equal(at(9)) || !done.UpdatedAt.Equal(at(9)) || done.ReportID != "r1" {
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
