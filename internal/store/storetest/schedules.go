package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testSchedules: a schedule is stored and listed; its due time is claimed
// once however many claim it at once; a due time while a run is going is
// recorded skipped with the reason; beats, finishing and abandoning move
// the record as documented; deleting removes it and its history.
func testSchedules(t *testing.T, st store.Store) {
	ctx := context.Background()
	opts := json.RawMessage(`{"time":1,"repeat":1,"set":{"udp-rate":"100M"}}`)
	bad := []struct {
		name string
		sc   store.Schedule
	}{
		{"no suite", store.Schedule{Every: time.Hour, Options: opts}},
		{"zero every", store.Schedule{Suite: "matrix", Options: opts}},
		{"bad options", store.Schedule{Suite: "matrix", Every: time.Hour, Options: json.RawMessage(`{`)}},
		{"bad slo", store.Schedule{Suite: "matrix", Every: time.Hour, Options: opts, SLO: json.RawMessage(`[`)}},
	}
	for _, b := range bad {
		if _, err := st.CreateSchedule(ctx, b.sc, at(0)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("create with %s: %v, want invalid", b.name, err)
		}
	}
	slo := json.RawMessage(`{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < 2"}]}`)
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: 10 * time.Second, Options: opts, SLO: slo}, at(0))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !sc.NextAt.Equal(at(0)) || sc.ID == "" {
		t.Fatalf("created %+v: want an id and next at %v (at once)", sc, at(0))
	}
	other, err := st.CreateSchedule(ctx, store.Schedule{Suite: "baseline", Every: time.Hour, Options: opts, NextAt: at(3600)}, at(1))
	if err != nil {
		t.Fatalf("create second: %v", err)
	}
	if _, err := st.CreateSchedule(ctx, store.Schedule{ID: sc.ID, Suite: "matrix", Every: time.Hour, Options: opts}, at(1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("create with a taken id: %v, want conflict", err)
	}
	got, err := st.GetSchedule(ctx, sc.ID)
	if err != nil || got.Every != 10*time.Second || string(got.SLO) != string(slo) || got.Suite != "matrix" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	var o map[string]any
	if err := json.Unmarshal(got.Options, &o); err != nil || o["repeat"] != float64(1) {
		t.Errorf("options read back %s: %v", got.Options, err)
	}
	all, err := st.ListSchedules(ctx)
	if err != nil || len(all) < 2 {
		t.Fatalf("list: %d schedules, %v", len(all), err)
	}
	due, err := st.DueSchedules(ctx, at(5))
	if err != nil {
		t.Fatalf("due: %v", err)
	}
	if ids := scheduleIDs(due); !slices.Contains(ids, sc.ID) || slices.Contains(ids, other.ID) {
		t.Errorf("due at 5 s: %v, want %s and not %s", ids, sc.ID, other.ID)
	}

	// Eight claims of one due time at once: exactly one wins.
	var wg sync.WaitGroup
	results := make([]error, 8)
	runs := make([]store.ScheduleRun, 8)
	for i := range results {
		wg.Go(func() { runs[i], results[i] = st.StartScheduleRun(ctx, sc.ID, at(0), at(10), at(5), at(-25)) })
	}
	wg.Wait()
	var first store.ScheduleRun
	wins := 0
	for i, err := range results {
		switch {
		case err == nil:
			wins++
			first = runs[i]
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("claim %d: %v, want nil or conflict", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d claims of one due time won, want 1", wins)
	}
	if first.State != store.ScheduleRunning || !first.DueAt.Equal(at(0)) || len(first.RunIDs) != 0 {
		t.Fatalf("first run %+v: want running, due at 0", first)
	}
	if s, _ := st.GetSchedule(ctx, sc.ID); !s.NextAt.Equal(at(10)) {
		t.Errorf("next at %v after the claim, want %v", s.NextAt, at(10))
	}
	if err := st.BeatScheduleRun(ctx, first.ID, []string{"run-a"}, at(8)); err != nil {
		t.Fatalf("beat: %v", err)
	}
	// Due again while the first is running (it beat at 8 s): skipped.
	skipped, err := st.StartScheduleRun(ctx, sc.ID, at(10), at(20), at(10), at(-20))
	if err != nil {
		t.Fatalf("second due time: %v", err)
	}
	if skipped.State != store.ScheduleSkipped || skipped.Reason == "" || skipped.FinishedAt == nil {
		t.Fatalf("second due time while the first runs: %+v, want skipped with a reason", skipped)
	}
	done, err := st.FinishScheduleRun(ctx, first.ID, store.ScheduleSucceeded, "", []string{"run-a", "run-b"}, json.RawMessage(`{"pairs":2}`), at(15))
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if done.State != store.ScheduleSucceeded || !slices.Equal(done.RunIDs, []string{"run-a", "run-b"}) || string(done.Summary) != `{"pairs":2}` || done.FinishedAt == nil || !done.FinishedAt.Equal(at(15)) {
		t.Errorf("finished %+v", done)
	}
	if _, err := st.FinishScheduleRun(ctx, first.ID, store.ScheduleFailed, "again", nil, nil, at(16)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("finish twice: %v, want not found", err)
	}
	if err := st.BeatScheduleRun(ctx, first.ID, nil, at(16)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beat a finished one: %v, want not found", err)
	}
	// A run whose server stopped beating is abandoned, and does not block.
	third, err := st.StartScheduleRun(ctx, sc.ID, at(20), at(30), at(20), at(-10))
	if err != nil || third.State != store.ScheduleRunning {
		t.Fatalf("third: %+v, %v; want running", third, err)
	}
	fourth, err := st.StartScheduleRun(ctx, sc.ID, at(30), at(40), at(60), at(30))
	if err != nil || fourth.State != store.ScheduleRunning {
		t.Fatalf("fourth, the third silent since 20 s and stale before 30 s: %+v, %v; want running", fourth, err)
	}
	gone, err := st.AbandonScheduleRuns(ctx, at(30), at(60))
	if err != nil || len(gone) != 1 || gone[0].ID != third.ID || gone[0].State != store.ScheduleFailed || gone[0].Reason == "" {
		t.Fatalf("abandon: %+v, %v; want the third, failed with a reason", gone, err)
	}
	hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var states []store.ScheduleRunState
	for _, h := range hist {
		states = append(states, h.State)
	}
	want := []store.ScheduleRunState{store.ScheduleRunning, store.ScheduleFailed, store.ScheduleSkipped, store.ScheduleSucceeded}
	if !slices.Equal(states, want) {
		t.Errorf("history newest first: %v, want %v", states, want)
	}
	fin, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Finished: true, Limit: 1})
	if err != nil || len(fin) != 1 || fin[0].ID != third.ID {
		t.Errorf("latest finished: %+v, %v; want the abandoned third", fin, err)
	}
	if ok, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: store.ScheduleSucceeded}); err != nil || len(ok) != 1 || ok[0].ID != first.ID {
		t.Errorf("succeeded ones: %+v, %v; want the first", ok, err)
	}
	if ok, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: store.ScheduleSucceeded, NoSummary: true}); err != nil || len(ok) != 1 ||
		ok[0].ID != first.ID || ok[0].Summary != nil || !slices.Equal(ok[0].RunIDs, []string{"run-a", "run-b"}) || ok[0].FinishedAt == nil {
		t.Errorf("succeeded ones without their summary: %+v, %v; want the first, its summary unread, the rest read", ok, err)
	}
	if _, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: "done"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("history in an unknown state: %v, want invalid", err)
	}
	if _, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("history without a schedule: %v, want invalid", err)
	}

	if _, err := st.DeleteSchedule(ctx, sc.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := st.GetSchedule(ctx, sc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get after delete: %v, want not found", err)
	}
	if _, err := st.DeleteSchedule(ctx, sc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete twice: %v, want not found", err)
	}
	if err := st.BeatScheduleRun(ctx, fourth.ID, nil, at(61)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beat of a deleted schedule's run: %v, want not found", err)
	}
	if _, err := st.StartScheduleRun(ctx, sc.ID, at(40), at(50), at(61), at(30)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("start a deleted schedule: %v, want not found", err)
	}
	if hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID}); err != nil || len(hist) != 0 {
		t.Errorf("history after delete: %d, %v; want none", len(hist), err)
	}
	if _, err := st.DeleteSchedule(ctx, other.ID); err != nil {
		t.Errorf("delete second: %v", err)
	}
}

func scheduleIDs(scs []store.Schedule) []string {
	var ids []string
	for _, s := range scs {
		ids = append(ids, s.ID)
	}
	return ids
}
