package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

// Defaults of Options.
const (
	DefaultTick       = time.Second
	DefaultBeatEvery  = 5 * time.Second
	DefaultStaleAfter = 45 * time.Second
)

// maxReason bounds a failure's reason as stored.
const maxReason = 2000

// Options configure a Scheduler. Store, API and Suites are required.
type Options struct {
	Store store.Store
	// API is the server's own API (an in-process client): the suites run
	// through it exactly as `cnperf run` runs them from outside.
	API    suite.API
	Suites *suite.Registry
	Log    *slog.Logger
	Now    func() time.Time
	// Tick is how often due schedules are looked for (1 s).
	Tick time.Duration
	// Leader, when set, says whether this server leads its replicas (the
	// server's leader lease): only the leader looks for due schedules and
	// abandoned records. The store's claim of a due time holds either way
	// (a leader paused past its lease may look beside its successor).
	Leader func() bool
	// BeatEvery is how often a running record is beaten (5 s);
	// StaleAfter how long one may go unbeaten before it counts as
	// abandoned (45 s) and no longer keeps its schedule from starting.
	BeatEvery, StaleAfter time.Duration
}

// Scheduler starts the due runs of the schedules in its store. Several
// servers on one database may each run one: the store's claim of a due
// time lets exactly one start it.
type Scheduler struct {
	o   Options
	log *slog.Logger
	wg  sync.WaitGroup // suite runs going
}

// New checks o.
func New(o Options) (*Scheduler, error) {
	if o.Store == nil || o.API == nil || o.Suites == nil {
		return nil, errors.New("schedule: a store, an API and suites are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.BeatEvery <= 0 {
		o.BeatEvery = DefaultBeatEvery
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	if o.StaleAfter < 3*o.BeatEvery {
		return nil, fmt.Errorf("schedule: stale after %v: want at least three beats (%v)", o.StaleAfter, 3*o.BeatEvery)
	}
	return &Scheduler{o: o, log: o.Log}, nil
}

// Run looks for due schedules every tick until ctx ends, then waits for
// the suite runs it started: they end with ctx, their runs cancelled on
// the server and their records failed ("the server stopped").
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Tick)
	defer t.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, max(3*s.o.Tick, 10*time.Second))
		if err := s.Tick(tctx, ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("schedules", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			s.wg.Wait()
			return
		case <-t.C:
		}
	}
}

// Wait waits for the suite runs Tick started to end.
func (s *Scheduler) Wait() { s.wg.Wait() }

// Tick fails abandoned records (cancelling their runs) and starts the
// schedules due now; the suite runs it starts live within runCtx.
func (s *Scheduler) Tick(ctx, runCtx context.Context) error {
	if s.o.Leader != nil && !s.o.Leader() {
		return nil
	}
	now := s.o.Now()
	gone, err := s.o.Store.AbandonScheduleRuns(ctx, now.Add(-s.o.StaleAfter), now)
	if err != nil {
		return err
	}
	for _, g := range gone {
		s.log.Warn("schedule run abandoned: its server stopped beating", "schedule", g.ScheduleID, "record", g.ID, "runs", g.RunIDs)
		for _, id := range g.RunIDs {
			if _, err := s.o.API.CancelRun(ctx, id, "its schedule's server stopped"); err != nil && api.StatusOf(err) != http.StatusConflict {
				s.log.Warn("cancel an abandoned schedule's run", "run_id", id, "err", err)
			}
		}
	}
	due, err := s.o.Store.DueSchedules(ctx, now)
	if err != nil {
		return err
	}
	var errs []error
	for _, sc := range due {
		if s.startsLate(sc) {
			busy, err := s.busy(ctx, sc.ID, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if busy {
				continue // due, and started once the run going ends
			}
		}
		next := NextDue(sc.NextAt, sc.Every, now)
		rec, err := s.o.Store.StartScheduleRun(ctx, sc.ID, sc.NextAt, next, now, now.Add(-s.o.StaleAfter))
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			continue // another server took this due time, or it was deleted
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if rec.State == store.ScheduleSkipped {
			s.log.Info("schedule skipped", "schedule", sc.ID, "reason", rec.Reason)
			continue
		}
		s.log.Info("schedule due: running", "schedule", sc.ID, "suite", sc.Suite, "record", rec.ID, "next", next)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.execute(runCtx, sc, rec)
		}()
	}
	return errors.Join(errs...)
}

// startsLate says whether a due time of sc that comes while its previous
// run is going starts as soon as that run ends (late), rather than being
// recorded skipped: so for a suite that rotates through cycles of a plan
// (one that takes the "cycle" setting, the matrix), whose window counts
// cycles, so that a skipped due time would stretch it by an interval.
// This is a Kubernetes CronJob's concurrencyPolicy Forbid with no
// startingDeadlineSeconds: the missed time runs when the active job
// ends, several missed times once.
func (s *Scheduler) startsLate(sc store.Schedule) bool {
	su, err := s.o.Suites.Get(sc.Suite)
	return err == nil && takes(su, "cycle")
}

// busy says whether schedule id has a run going (beaten within
// StaleAfter).
func (s *Scheduler) busy(ctx context.Context, id string, now time.Time) (bool, error) {
	runs, err := s.o.Store.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: id, State: store.ScheduleRunning, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("schedule %s: runs going: %w", id, err)
	}
	return len(runs) > 0 && !runs[0].BeatAt.Before(now.Add(-s.o.StaleAfter)), nil
}

// takes says whether su documents the setting name.
func takes(su suite.Suite, name string) bool {
	return slices.ContainsFunc(suite.KeysOf(su), func(k suite.Key) bool { return k.Name == name })
}

// NextDue is the first time after now on the schedule's grid (due + k ×
// every): due times missed while no server ran are not made up.
func NextDue(due time.Time, every time.Duration, now time.Time) time.Time {
	next := due.Add(every)
	if !next.After(now) {
		k := now.Sub(due)/every + 1
		next = due.Add(k * every)
	}
	return next
}

// Span is how long runs of the given lengths take, from the first's
// start to the last's end, on a schedule every `every` whose missed due
// times start late (startsLate): each run starts at its due time or at
// the previous run's end, whichever is later, and the next due time is
// the grid's first after its start. It is the time a cycled suite's
// schedule takes to run a plan's window of cycles.
func Span(every time.Duration, runs []time.Duration) time.Duration {
	var due, end time.Duration
	for _, d := range runs {
		start := max(due, end)
		end = start + d
		due = (start/every + 1) * every
	}
	return end
}

// recorder is the API with the ids of the runs made through it kept.
type recorder struct {
	suite.API
	mu  sync.Mutex
	ids []string
}

func (r *recorder) CreateRun(ctx context.Context, rc api.RunCreate) (api.Run, error) {
	run, err := r.API.CreateRun(ctx, rc)
	if err == nil {
		r.mu.Lock()
		r.ids = append(r.ids, run.ID)
		r.mu.Unlock()
	}
	return run, err
}

func (r *recorder) runIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// execute runs the schedule's suite for record rec, beating the record
// while it runs, and finishes it with the summary or the reason.
func (s *Scheduler) execute(ctx context.Context, sc store.Schedule, rec store.ScheduleRun) {
	log := s.log.With("schedule", sc.ID, "suite", sc.Suite, "record", rec.ID)
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	apiRec := &recorder{API: s.o.API}
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		t := time.NewTicker(s.o.BeatEvery)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			bctx, bcancel := context.WithTimeout(rctx, s.o.BeatEvery)
			err := s.o.Store.BeatScheduleRun(bctx, rec.ID, apiRec.runIDs(), s.o.Now())
			bcancel()
			if errors.Is(err, store.ErrNotFound) {
				cancel(errors.New("the schedule was deleted (or its record abandoned)"))
				return
			}
			if err != nil && rctx.Err() == nil {
				log.Warn("beat schedule run", "err", err)
			}
		}
	}()
	rep, runErr := s.run(rctx, sc, apiRec, fmt.Sprintf("schedule-%s-%d", sc.ID, rec.ID))
	cancel(nil)
	<-beatDone
	state, reason := store.ScheduleSucceeded, ""
	if runErr != nil {
		state, reason = store.ScheduleFailed, runErr.Error()
		if cause := context.Cause(rctx); cause != nil && !errors.Is(cause, context.Canceled) {
			reason = cause.Error() + ": " + reason
		} else if ctx.Err() != nil {
			reason = "the server stopped during the run: " + reason
		}
		if len(reason) > maxReason {
			reason = reason[:maxReason] + "…"
		}
	}
	var sum json.RawMessage
	if rep != nil {
		raw, err := json.Marshal(*rep)
		if err != nil {
			log.Warn("encode schedule summary", "err", err)
		} else {
			sum = raw
		}
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	if _, err := s.o.Store.FinishScheduleRun(fctx, rec.ID, state, reason, apiRec.runIDs(), sum, s.o.Now()); err != nil {
		log.Warn("finish schedule run", "err", err)
		return
	}
	log.Info("schedule run finished", "state", state, "reason", reason, "runs", len(apiRec.runIDs()))
}

// run plans and runs the suite (the same suite.Runner as `cnperf run`)
// and summarises its rows; the summary is nil when it could not run.
func (s *Scheduler) run(ctx context.Context, sc store.Schedule, a suite.API, invocation string) (*api.ScheduleSummary, error) {
	su, err := s.o.Suites.Get(sc.Suite)
	if err != nil {
		return nil, err
	}
	o, err := options(sc)
	if err != nil {
		return nil, err
	}
	var objs []suite.Objective
	if len(sc.SLO) > 0 {
		if objs, err = suite.ParseSLOs(sc.SLO, s.o.Suites); err != nil {
			return nil, err
		}
	}
	next, cycled := s.cycle(ctx, sc, su, &o)
	runner := &suite.Runner{API: a, Log: s.log, Invocation: invocation}
	rep, err := runner.Run(ctx, su, o)
	if err != nil {
		return nil, err
	}
	var checks []suite.Check
	if len(objs) > 0 {
		checks = suite.Evaluate(objs, rep.Rows)
	}
	sum := Summarize(rep.Rows, checks, len(objs) > 0)
	if cycled {
		sum.NextCycle = next
	}
	return &sum, nil
}

// cycle sets the "cycle" setting of a suite that has one (the matrix's
// pair plan) and the schedule did not fix: the cycle after the last
// finished run's (its summary's NextCycle), so consecutive runs rotate
// through the plan. A run of a schedule measures one cycle ("cycles" 1)
// unless the schedule says otherwise; a run on its own defaults to the
// plan's whole window. It returns the cycle the run after this one starts
// at, and whether it set one.
func (s *Scheduler) cycle(ctx context.Context, sc store.Schedule, su suite.Suite, o *suite.Options) (int, bool) {
	hasCycle, hasCycles := takes(su, "cycle"), takes(su, "cycles")
	set := maps.Clone(o.Set)
	if set == nil {
		set = map[string]string{}
	}
	if _, ok := set["cycles"]; hasCycles && !ok {
		set["cycles"] = "1"
	}
	o.Set = set
	if _, fixed := set["cycle"]; !hasCycle || fixed {
		return 0, false
	}
	c := 0
	runs, err := s.o.Store.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Finished: true, Limit: 1})
	if err != nil {
		s.log.Warn("schedule: last run's cycle", "schedule", sc.ID, "err", err)
	}
	if len(runs) > 0 && len(runs[0].Summary) > 0 {
		var last api.ScheduleSummary
		if json.Unmarshal(runs[0].Summary, &last) == nil {
			c = last.NextCycle
		}
	}
	n := 1
	if v, err := strconv.Atoi(set["cycles"]); err == nil && v > 0 {
		n = v
	}
	set["cycle"] = strconv.Itoa(c)
	return c + n, true
}
