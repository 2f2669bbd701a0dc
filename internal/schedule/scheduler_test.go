package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// fakeAPI is a server with two agents on two nodes whose runs end at once
// (their tasks failed: no probe runs here), or stay running while hold is
// set; it records the runs created and cancelled.
type fakeAPI struct {
	mu        sync.Mutex
	hold      bool
	runs      map[string]api.Run
	created   []string
	cancelled []string
}

func newFakeAPI() *fakeAPI { return &fakeAPI{runs: map[string]api.Run{}} }

func (f *fakeAPI) Agents(context.Context, bool) ([]api.Agent, error) {
	return []api.Agent{
		{PodUID: "u1", PodName: "p1", NodeName: "n1", PodIP: "10.0.0.1", Status: "free"},
		{PodUID: "u2", PodName: "p2", NodeName: "n2", PodIP: "10.0.0.2", Status: "free"},
	}, nil
}

func (f *fakeAPI) CreateRun(_ context.Context, rc api.RunCreate) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := api.Run{ID: fmt.Sprintf("run-%d", len(f.runs)+1), Suite: rc.Suite, State: api.RunSucceeded, Params: rc.Params}
	if f.hold {
		run.State = api.RunRunning
	}
	for i := range rc.Tasks {
		run.Tasks = append(run.Tasks, api.TaskV2{ID: int64(i + 1), TaskID: fmt.Sprintf("%s-t%d", run.ID, i), State: api.StateFailed, Reason: "fake server: no probe ran"})
	}
	f.runs[run.ID] = run
	f.created = append(f.created, run.ID)
	return run, nil
}

func (f *fakeAPI) GetRun(_ context.Context, id string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	if !ok {
		return r, &api.Error{Status: 404, Message: "run " + id + ": not found"}
	}
	return r, nil
}

func (f *fakeAPI) CancelRun(_ context.Context, id, _ string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	r := f.runs[id]
	r.State = api.RunCancelled
	f.runs[id] = r
	return r, nil
}

// release ends the runs held running (succeeded) and holds no more.
func (f *fakeAPI) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = false
	for id, r := range f.runs {
		if r.State == api.RunRunning {
			r.State = api.RunSucceeded
			f.runs[id] = r
		}
	}
}

func (f *fakeAPI) counts() (created, cancelled []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created), slices.Clone(f.cancelled)
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func newScheduler(t *testing.T, st store.Store, a *fakeAPI, now func() time.Time) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(schedule.Options{Store: st, API: a, Suites: builtin.Registry(), Now: now, BeatEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var matrixOptions = []byte(`{"time":0.1,"repeat":1}`)

// TestReplicasStartADueTimeOnce: two servers' schedulers, each with its
// own connections to one database (SQLite, PostgreSQL, MariaDB), look at
// a due schedule at the same moment: one runs it, and the run it made is
// recorded with the matrix's runs (2 nodes: 2 rounds).
func TestReplicasStartADueTimeOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dsn string) {
		if strings.HasPrefix(dsn, "sqlite:") {
			// A SQLite store serves one server: a second one is refused
			// (store.ErrLocked, TestSQLiteOneWriter), so there are no
			// SQLite replicas to race.
			t.Skip("a SQLite store serves one server; replicas run on PostgreSQL or MySQL")
		}
		ctx := context.Background()
		st1, st2 := storetest.Open(t, dsn), storetest.Open(t, dsn)
		t0 := time.Now().UTC()
		sc, err := st1.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: matrixOptions, NextAt: t0}, t0)
		if err != nil {
			t.Fatal(err)
		}
		a1, a2 := newFakeAPI(), newFakeAPI()
		s1, s2 := newScheduler(t, st1, a1, time.Now), newScheduler(t, st2, a2, time.Now)
		var wg sync.WaitGroup
		for _, s := range []*schedule.Scheduler{s1, s2} {
			wg.Go(func() {
				if err := s.Tick(ctx, ctx); err != nil {
					t.Errorf("tick: %v", err)
				}
				s.Wait()
			})
		}
		wg.Wait()
		if h, _ := st1.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID}); len(h) > 0 {
			t.Logf("record: %s %s", h[0].State, h[0].Reason)
		}
		c1, _ := a1.counts()
		c2, _ := a2.counts()
		if len(c1)+len(c2) != 2 || (len(c1) != 0 && len(c2) != 0) {
			t.Fatalf("runs created: %v by one server, %v by the other; want the matrix's 2 by one of them", c1, c2)
		}
		hist, err := st1.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
		if err != nil || len(hist) != 1 {
			t.Fatalf("history: %+v, %v; want one record", hist, err)
		}
		if r := hist[0]; r.State != store.ScheduleSucceeded || len(r.RunIDs) != 2 || len(r.Summary) == 0 {
			t.Errorf("record %+v: want succeeded with 2 run ids and a summary", r)
		}
		if got, _ := st1.GetSchedule(ctx, sc.ID); !got.NextAt.Equal(sc.NextAt.Add(time.Hour)) {
			t.Errorf("next due %v, want %v", got.NextAt, sc.NextAt.Add(time.Hour))
		}
	})
}

// TestOnlyTheLeaderLooks: with a leader hook, a replica that does not
// lead starts nothing; the leader does.
func TestOnlyTheLeaderLooks(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	t0 := time.Now().UTC()
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: matrixOptions, NextAt: t0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, lead := range []bool{false, true} {
		a := newFakeAPI()
		s, err := schedule.New(schedule.Options{Store: st, API: a, Suites: builtin.Registry(), Leader: func() bool { return lead }})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Tick(ctx, ctx); err != nil {
			t.Fatal(err)
		}
		s.Wait()
		hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := a.counts(); (len(c) > 0) != lead || (len(hist) == 1) != lead {
			t.Errorf("leader %v: runs %v, records %d", lead, c, len(hist))
		}
	}
}

// TestSkipWhileRunningThenDelete: a due time while the run of a
// schedule of a suite without cycles is going is recorded skipped;
// deleting the schedule cancels the run going.
func TestSkipWhileRunningThenDelete(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := storetest.Open(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "plain", Every: 10 * time.Second, Options: matrixOptions}, t0)
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeAPI()
	a.hold = true
	s, err := schedule.New(schedule.Options{Store: st, API: a, Suites: suite.NewRegistry(plain{}), Now: clk.Now, BeatEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx, ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { c, _ := a.counts(); return len(c) == 1 }, "the first round's run")
	clk.Set(t0.Add(11 * time.Second))
	if err := s.Tick(ctx, ctx); err != nil {
		t.Fatal(err)
	}
	hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %+v, %v", hist, err)
	}
	if hist[0].State != store.ScheduleSkipped || !strings.Contains(hist[0].Reason, "still going") || hist[1].State != store.ScheduleRunning {
		t.Fatalf("history %+v: want the second due time skipped while the first runs", hist)
	}
	if _, err := st.DeleteSchedule(ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, c := a.counts(); return slices.Contains(c, "run-1") }, "the deleted schedule's run cancelled")
	s.Wait()
	if c, _ := a.counts(); len(c) != 1 {
		t.Errorf("runs created %v, want only the first round's (the suite stopped)", c)
	}
}

// TestAbandonedRunIsFailedAndCancelled: a record whose server stopped
// beating is failed by the next look, and its runs are cancelled.
func TestAbandonedRunIsFailedAndCancelled(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: matrixOptions}, t0)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.StartScheduleRun(ctx, sc.ID, t0, t0.Add(time.Hour), t0, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BeatScheduleRun(ctx, rec.ID, []string{"run-of-a-dead-server"}, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	a := newFakeAPI()
	clk := &clock{t: t0.Add(time.Minute)}
	if err := newScheduler(t, st, a, clk.Now).Tick(ctx, ctx); err != nil {
		t.Fatal(err)
	}
	hist, err := st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID})
	if err != nil || len(hist) != 1 || hist[0].State != store.ScheduleFailed || !strings.Contains(hist[0].Reason, "abandoned") {
		t.Fatalf("history %+v, %v; want the record failed as abandoned", hist, err)
	}
	if _, c := a.counts(); !slices.Equal(c, []string{"run-of-a-dead-server"}) {
		t.Errorf("cancelled %v, want the abandoned record's run", c)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
