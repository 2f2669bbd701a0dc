package schedule_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestScheduleRotatesMatrixCycles: consecutive runs of a schedule of the
// sampled matrix start at consecutive cycles (the last run's summary
// carries the next), so the plan's pair sets rotate; without "cycles" a
// run of a schedule measures one cycle (a run on its own, the window).
func TestScheduleRotatesMatrixCycles(t *testing.T) {
	for _, tc := range []struct {
		name, opts   string
		firsts       []string
		cyclesPerRun string
	}{
		{"cycles 2", `{"time":0.1,"repeat":1,"set":{"plan":"sample","peers":"1","cycles":"2"}}`, []string{"0", "2", "4"}, "2"},
		{"cycles unset", `{"time":0.1,"repeat":1,"set":{"plan":"sample","peers":"1"}}`, []string{"0", "1", "2"}, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) { scheduleRotates(t, []byte(tc.opts), tc.firsts, tc.cyclesPerRun) })
	}
}

func scheduleRotates(t *testing.T, opts []byte, want []string, cyclesPerRun string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := storetest.Open(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: 10 * time.Second, Options: opts}, t0)
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeAPI()
	s := newScheduler(t, st, a, clk.Now)
	for i := 0; i < 3; i++ {
		clk.Set(t0.Add(time.Duration(i) * 11 * time.Second))
		if err := s.Tick(ctx, ctx); err != nil {
			t.Fatal(err)
		}
		s.Wait()
	}
	hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Finished: true})
	if err != nil || len(hist) != 3 {
		t.Fatalf("history %+v, %v; want 3 finished runs", hist, err)
	}
	var firsts []string
	created, _ := a.counts()
	seen := map[string]bool{}
	for _, id := range created {
		run, _ := a.GetRun(ctx, id)
		var p suite.RunParams
		if err := json.Unmarshal(run.Params, &p); err != nil {
			t.Fatal(err)
		}
		if !seen[p.Invocation] {
			seen[p.Invocation] = true
			firsts = append(firsts, p.Options.Set["cycle"])
			if got := p.Options.Set["cycles"]; got != cyclesPerRun {
				t.Errorf("run %s: cycles %q, want %q a run", id, got, cyclesPerRun)
			}
		}
	}
	if !slices.Equal(firsts, want) {
		t.Errorf("the runs started at cycles %v, want %v", firsts, want)
	}
}
