package server

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestStopAcknowledged: a task's answer has no stopped_at until its agent
// acknowledges the cancellation (its cancelled report, sent after it
// stopped the task and removed its set-up); then stopped_at and
// stop_reason say when and what the agent said, the outcome stays the
// server's (the reply says duplicate: no result stored), and the report
// again changes nothing.
func TestStopAcknowledged(t *testing.T) { storetest.ForEach(t, testStopAcknowledged) }

func testStopAcknowledged(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	runID, id := f.dispatchedRunTask()
	if err := f.agent.Start(ctx, id, "uid-a"); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Second)
	if _, err := f.user.CancelRun(ctx, runID, "phase done"); err != nil {
		t.Fatal(err)
	}
	code, body := f.do(http.MethodGet, "/api/v2/tasks/"+id, userTok, nil)
	if code != http.StatusOK || bytes.Contains(body, []byte("stopped_at")) || bytes.Contains(body, []byte("stop_reason")) {
		t.Errorf("cancelled, not acknowledged: %d %s, want no stopped_at or stop_reason", code, body)
	}
	f.clock.Add(1500 * time.Millisecond)
	rep := api.Report{TaskID: id, PodUID: "uid-a", ReportID: "ack", State: api.StateCancelled, Reason: "cancelled by the server"}
	reply, err := f.agent.Report(ctx, rep)
	if err != nil || !reply.Duplicate || reply.State != api.StateCancelled {
		t.Fatalf("acknowledgement: %+v (%v), want cancelled, a duplicate (no result stored)", reply, err)
	}
	stopped := f.clock.Now()
	tk, err := f.user.GetTask(ctx, id)
	if err != nil || tk.StoppedAt == nil || !tk.StoppedAt.Equal(stopped) || tk.StopReason != rep.Reason || tk.Reason != "phase done" || tk.State != api.StateCancelled {
		t.Errorf("acknowledged task: %s %q stopped_at %v stop_reason %q (%v)", tk.State, tk.Reason, tk.StoppedAt, tk.StopReason, err)
	}
	if r, err := f.user.GetRun(ctx, runID); err != nil || len(r.Tasks) != 1 || r.Tasks[0].StoppedAt == nil {
		t.Errorf("run's task: %+v (%v), want stopped_at", r.Tasks, err)
	}
	f.clock.Add(time.Second)
	if reply, err := f.agent.Report(ctx, rep); err != nil || !reply.Duplicate {
		t.Errorf("acknowledgement again: %+v (%v), want a duplicate", reply, err)
	}
	if tk, err := f.user.GetTask(ctx, id); err != nil || tk.StoppedAt == nil || !tk.StoppedAt.Equal(stopped) {
		t.Errorf("after the acknowledgement again: stopped_at %v (%v), want %v kept", tk.StoppedAt, err, stopped)
	}
}
