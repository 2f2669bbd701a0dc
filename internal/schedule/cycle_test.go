package schedule_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
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

// plain is the matrix without its documented settings, so without the
// "cycle" setting: a suite that does not rotate through a plan.
type plain struct{ matrix.Suite }

func (plain) Name() string      { return "plain" }
func (plain) Keys() []suite.Key { return nil }

// TestLateDueTimeOfACycledSuite: a due time that comes while the run of
// a schedule of the matrix (a suite with cycles) is going starts as soon
// as that run ends, late, not skipped, and the next due time stays on
// the grid; a schedule of a suite without cycles records it skipped.
func TestLateDueTimeOfACycledSuite(t *testing.T) {
	for _, tc := range []struct {
		suite    string
		wantLate bool
	}{
		{"matrix", true},
		{"plain", false},
	} {
		t.Run(tc.suite, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := storetest.Open(t, "sqlite:"+t.TempDir()+"/cnperf.db")
			t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			clk := &clock{t: t0}
			sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: tc.suite, Every: 10 * time.Second, Options: []byte(`{"time":0.1,"repeat":1,"set":{"cycles":"1"}}`)}, t0)
			if err != nil {
				t.Fatal(err)
			}
			a := newFakeAPI()
			a.hold = true
			s, err := schedule.New(schedule.Options{Store: st, API: a, Suites: suite.NewRegistry(matrix.Suite{}, plain{}), Now: clk.Now, BeatEvery: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			tick := func(at time.Duration) {
				t.Helper()
				clk.Set(t0.Add(at))
				if err := s.Tick(ctx, ctx); err != nil {
					t.Fatal(err)
				}
			}
			tick(0)
			waitFor(t, func() bool { c, _ := a.counts(); return len(c) == 1 }, "the first run")
			tick(11 * time.Second) // due at 10 s, the first run still going
			a.release()
			s.Wait()
			tick(13 * time.Second) // the first run has ended
			s.Wait()
			hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
			if err != nil || len(hist) != 2 {
				t.Fatalf("history %+v, %v; want two records", hist, err)
			}
			second := hist[0]
			if tc.wantLate {
				if second.State != store.ScheduleSucceeded || !second.DueAt.Equal(t0.Add(10*time.Second)) || !second.StartedAt.Equal(t0.Add(13*time.Second)) {
					t.Errorf("second record %s (%s) due %v started %v; want the 10 s due time run at 13 s, when the first ended", second.State, second.Reason, second.DueAt, second.StartedAt)
				}
			} else if second.State != store.ScheduleSkipped || !strings.Contains(second.Reason, "still going") {
				t.Errorf("second record %s (%s); want skipped while the first ran", second.State, second.Reason)
			}
			if got, _ := st.GetSchedule(ctx, sc.ID); !got.NextAt.Equal(t0.Add(20 * time.Second)) {
				t.Errorf("next due %v, want %v (the grid)", got.NextAt, t0.Add(20*time.Second))
			}
		})
	}
}

// TestSpan: runs start at their due time or when the previous ends, and
// due times stay on the grid.
func TestSpan(t *testing.T) {
	m := time.Minute
	for _, tc := range []struct {
		name  string
		every time.Duration
		runs  []time.Duration
		want  time.Duration
	}{
		{"none", m, nil, 0},
		{"shorter than every", 5 * m, []time.Duration{4 * m, 4 * m, 4 * m}, 14 * m},
		{"longer: back to back", 3 * m, []time.Duration{4 * m, 4 * m, 4 * m}, 12 * m},
		{"one long, then back on the grid", 5 * m, []time.Duration{7 * m, 1 * m, 1 * m}, 11 * m},
	} {
		if got := schedule.Span(tc.every, tc.runs); got != tc.want {
			t.Errorf("%s: Span = %v, want %v", tc.name, got, tc.want)
		}
	}
}
