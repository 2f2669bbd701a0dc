package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/hostinfo"
)

// API is the part of the server's API the Runner uses;
// *client.Client implements it.
type API interface {
	Agents(ctx context.Context, all bool) ([]api.Agent, error)
	CreateRun(ctx context.Context, rc api.RunCreate) (api.Run, error)
	GetRun(ctx context.Context, id string) (api.Run, error)
	CancelRun(ctx context.Context, id, reason string) (api.Run, error)
}

// Runner runs suites through the server's API.
type Runner struct {
	API API
	// Env is the environment under the run (the lab, a cluster); nil means
	// one that can change nothing, so suites that need changes are refused.
	Env Env
	// Progress, when set, gets a progress line (what runs now, how many
	// steps are left, elapsed time) while a run takes longer than a few
	// seconds; on a terminal the line is rewritten in place.
	Progress io.Writer
	// Log gets the runs' ids and phases (nil: discarded).
	Log *slog.Logger
	// Poll is how often the run is polled (default 500 ms).
	Poll time.Duration
	// Invocation groups the runs (default: random). The lab sets one id for
	// all backends of a cni-compare.
	Invocation string
}

// Report is the result of one suite run.
type Report struct {
	Suite   string   `json:"suite"`
	RunIDs  []string `json:"run_ids"`
	Options Options  `json:"options"`
	Rows    []Row    `json:"rows"`
	// Environment is what the run ran on, when the Env can say
	// (Describer); it is stored with every phase's run too.
	Environment *hostinfo.Environment `json:"environment,omitempty"`
	// Outcomes are the steps with their results, in plan order.
	Outcomes []Outcome `json:"-"`
	// Runs are the phases' runs as the server last answered them (tasks
	// included), so a report of the run as it ends is built as one of the
	// stored runs is (report.FromRuns).
	Runs []api.Run `json:"-"`
}

// maxPhases bounds the phases of one suite run (a Follower's search).
const maxPhases = 1000

// progressAfter is how long a run goes before the progress line appears.
const progressAfter = 2 * time.Second

// waitSlack is added to the sum of a run's task timeouts to bound the wait.
const waitSlack = 60 * time.Second

// caps returns what the environment can change.
func (r *Runner) caps() Caps {
	if r.Env == nil {
		return Caps{}
	}
	return r.Env.Caps()
}

// Plan lists the agents online now and plans s for them, then checks,
// before anything is created, that the environment can make every change
// the phases need (naming what it lacks) and, when it can check them
// (Checker), that each change will take.
func (r *Runner) Plan(ctx context.Context, s Suite, o Options) ([]Endpoint, []Phase, error) {
	agents, err := r.API.Agents(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("list agents: %w", err)
	}
	eps := Endpoints(agents)
	if nl, ok := r.Env.(NodeLabeler); ok {
		// Only plans by zone need them, and say so when they are missing.
		labels, err := nl.NodeLabels(ctx)
		if err != nil && r.Log != nil {
			r.Log.Warn("node labels", "err", err)
		}
		byNode := make(map[string]*NodeLabels, len(labels))
		for node, l := range labels {
			nl := NodeLabels(l)
			byNode[node] = &nl
		}
		for i := range eps {
			if l, ok := byNode[eps[i].Node]; ok {
				eps[i].NodeLabels = l // else keep what the agent reported
			}
		}
	}
	caps := r.caps()
	phases, err := s.Plan(eps, o, caps)
	if err != nil {
		return eps, nil, err
	}
	if len(phases) == 0 {
		return eps, nil, fmt.Errorf("suite %s planned nothing for %d agents", s.Name(), len(eps))
	}
	if err := r.check(ctx, s.Name(), caps, phases); err != nil {
		return eps, nil, err
	}
	return eps, phases, nil
}

// check refuses phases whose changes the environment cannot make.
func (r *Runner) check(ctx context.Context, suite string, caps Caps, phases []Phase) error {
	if err := caps.Lacks(suite, needs(phases)...); err != nil {
		return err
	}
	c, ok := r.Env.(Checker)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for _, ph := range phases {
		for _, ch := range ph.Changes {
			key := ch.String()
			if seen[key] {
				continue
			}
			seen[key] = true
			if err := c.Check(ctx, ch); err != nil {
				return fmt.Errorf("suite %s: %s: %w", suite, ch, err)
			}
		}
	}
	return nil
}

// Run plans s for the agents online now and runs its phases one after
// another, each as one run on the server, then aggregates the rows. A
// phase's changes are made before its run is created and undone after it
// ends; when ctx ends the current run is cancelled on the server and the
// changes are still undone. A step that failed is in its row's Errors; Run
// fails only when the suite could not be run at all.
func (r *Runner) Run(ctx context.Context, s Suite, o Options) (rep Report, err error) {
	if f, ok := r.Env.(Finisher); ok {
		defer func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			if ferr := f.Finish(tctx); ferr != nil {
				err = errors.Join(err, fmt.Errorf("suite %s: finish: %w", s.Name(), ferr))
			}
		}()
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep = Report{Suite: s.Name(), Options: o}
	eps, phases, err := r.Plan(ctx, s, o)
	if err != nil {
		return rep, err
	}
	inv := r.Invocation
	if inv == "" {
		inv = newInvocation()
	}
	rep.Environment = r.describe(ctx, log)
	if a, ok := s.(Announcer); ok {
		if st := a.Announce(eps, o); st != "" {
			log.Info("plan", "suite", s.Name(), "plan", st)
			if r.Progress != nil {
				fmt.Fprintln(r.Progress, st)
			}
		}
	}
	total := 0
	for _, ph := range phases {
		total += len(ph.Steps)
	}
	pr := newProgress(r.Progress, s.Name(), total)
	defer pr.finish()
	done := 0
	follower, _ := s.(Follower)
	for i := 0; i < len(phases); i++ {
		ph := phases[i]
		if len(ph.Steps) == 0 {
			continue
		}
		params := RunParams{APIVersion: ParamsAPIVersion, Suite: s.Name(), Invocation: inv, Phase: ph.Name,
			PhaseIndex: i, Phases: len(phases), Options: o, Environment: rep.Environment}
		outs, run, err := r.runPhase(ctx, ph, params, pr, done)
		id := run.ID
		if id != "" {
			rep.RunIDs = append(rep.RunIDs, id)
			rep.Runs = append(rep.Runs, run)
		}
		rep.Outcomes = append(rep.Outcomes, outs...)
		if err != nil {
			return rep, fmt.Errorf("suite %s, phase %q: %w", s.Name(), ph.Name, err)
		}
		log.Info("phase done", "suite", s.Name(), "phase", ph.Name, "run_id", id)
		done += len(ph.Steps)
		if i == len(phases)-1 && follower != nil {
			// A searching suite plans its next round from what it has.
			more, err := follower.Follow(eps, o, r.caps(), rep.Outcomes)
			if err != nil {
				return rep, fmt.Errorf("suite %s, after phase %q: %w", s.Name(), ph.Name, err)
			}
			if len(phases)+len(more) > maxPhases {
				return rep, fmt.Errorf("suite %s planned more than %d phases", s.Name(), maxPhases)
			}
			if err := r.check(ctx, s.Name(), r.caps(), more); err != nil {
				return rep, err
			}
			phases = append(phases, more...)
			for _, m := range more {
				pr.total += len(m.Steps)
			}
		}
	}
	rep.Rows = s.Rows(rep.Outcomes)
	return rep, nil
}

// runPhase makes the phase's changes, creates its run, waits for it and
// undoes the changes again, in reverse order, whatever happened. When
// the run ended, the undos run before the outcomes are made, so those
// of the changes made while it ran carry when each was undone.
func (r *Runner) runPhase(ctx context.Context, ph Phase, params RunParams, pr *progress, done int) (outs []Outcome, run api.Run, err error) {
	var undos []undoOf
	defer func() {
		if len(undos) > 0 {
			err = errors.Join(err, r.undo(ctx, undos))
		}
	}()
	need := phaseLength(ph)
	var later []Change // made while the run runs
	for _, c := range ph.Changes {
		if c.For == 0 {
			c.For = need
		}
		if r.Env == nil {
			return nil, api.Run{}, fmt.Errorf("change %s: no environment under the run", c)
		}
		if c.After > 0 {
			later = append(later, c)
			continue
		}
		undo, err := r.Env.Apply(ctx, c)
		if err != nil {
			return nil, api.Run{}, fmt.Errorf("set up %s: %w", c, err)
		}
		if undo != nil {
			undos = append(undos, undoOf{undo: undo})
		}
	}
	if rw, ok := r.Env.(Rewriter); ok && len(ph.Changes) > 0 {
		steps := make([]Step, len(ph.Steps))
		for i, st := range ph.Steps {
			steps[i] = rw.Rewrite(st)
		}
		ph.Steps = steps
	}
	for _, st := range ph.Steps {
		if st.Service && st.Via == "" {
			return nil, api.Run{}, fmt.Errorf("step %s %s to %s needs a Service in front of it, and the environment made none", st.Connection, st.Measure, st.Dst.Name)
		}
	}
	params.Steps = ph.Steps
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, api.Run{}, fmt.Errorf("encode params: %w", err)
	}
	rc := api.RunCreate{Suite: params.Suite, AllowConcurrency: ph.Concurrent, Params: raw}
	for _, st := range ph.Steps {
		rc.Tasks = append(rc.Tasks, st.Task())
	}
	run, err = r.API.CreateRun(ctx, rc)
	if err != nil {
		return nil, api.Run{}, fmt.Errorf("create run: %w", err)
	}
	stopLater, laterDone := r.applyLater(ctx, later)
	run, err = r.wait(ctx, run, ph, pr, done)
	stopLater()
	lundos, made, lerr := laterDone()
	undos = append(undos, lundos...)
	if err != nil {
		return nil, run, errors.Join(err, lerr)
	}
	if lerr != nil {
		return nil, run, lerr
	}
	uerr := r.undo(ctx, undos)
	undos = nil
	defer func() { err = errors.Join(err, uerr) }()
	outs, err = outcomes(run, ph.Steps)
	for i := range outs {
		outs[i].Made = made
	}
	if len(made) > 0 {
		// Reports are made from the runs (report.FromLive): the times go
		// with the run's params.
		params.Made = made
		if raw, merr := json.Marshal(params); merr == nil {
			run.Params = raw
		}
	}
	return outs, run, err
}

// undoOf is an undo to run and, for a change made while the run ran,
// its record, which gets when it was undone.
type undoOf struct {
	undo func(context.Context) error
	made *ChangeMade
}

// applyLater makes each change at its After from now, in a goroutine of
// its own, until stop is called (a change not yet due then is not made).
// done waits for them and returns the undos of those made, in the order
// they were asked for, when each was asked for and made (the undos point
// into these records), and why any failed.
func (r *Runner) applyLater(ctx context.Context, changes []Change) (stop func(), done func() ([]undoOf, []ChangeMade, error)) {
	lctx, cancel := context.WithCancel(ctx)
	type later struct {
		m    ChangeMade
		undo func(context.Context) error
		ok   bool
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards all and errs
		all  []later
		errs []error
	)
	for _, c := range changes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(c.After)
			defer t.Stop()
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			asked := time.Now()
			undo, err := r.Env.Apply(ctx, c)
			l := later{m: ChangeMade{Change: c, Asked: asked, Made: time.Now()}, undo: undo, ok: err == nil}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("set up %s after %v: %w", c, c.After, err))
			}
			all = append(all, l)
		}()
	}
	return cancel, func() ([]undoOf, []ChangeMade, error) {
		wg.Wait()
		cancel()
		slices.SortFunc(all, func(a, b later) int { return a.m.Asked.Compare(b.m.Asked) })
		made := make([]ChangeMade, 0, len(all))
		for _, l := range all {
			if l.ok {
				made = append(made, l.m)
			}
		}
		var undos []undoOf
		i := 0
		for _, l := range all {
			u := undoOf{undo: l.undo}
			if l.ok {
				u.made = &made[i]
				i++
			}
			if u.undo != nil {
				undos = append(undos, u)
			}
		}
		return undos, made, errors.Join(errs...)
	}
}

// phaseLength is how long the phase's longest step runs: its duration,
// else its count of pings or requests at its interval, else 10 s.
func phaseLength(ph Phase) time.Duration {
	var longest time.Duration
	for _, st := range ph.Steps {
		d := st.Spec.DurationOr(0)
		if d == 0 && st.Spec.Count > 0 {
			d = time.Duration(st.Spec.Count) * st.Spec.IntervalOr(time.Second)
		}
		if d == 0 {
			d = 10 * time.Second
		}
		longest = max(longest, d)
	}
	return longest
}

// undoTimeout bounds undoing a phase's changes (an environment's undo of
// a policy set waits up to 30 s for its pair to connect again).
const undoTimeout = 90 * time.Second

// undo undoes changes in reverse order with a fresh bounded context, so
// that an interrupted run still undoes its network changes; a change
// made while the run ran gets when it was undone.
func (r *Runner) undo(ctx context.Context, undos []undoOf) error {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	var errs []error
	for i := len(undos) - 1; i >= 0; i-- {
		asked := time.Now()
		err := undos[i].undo(tctx)
		if m := undos[i].made; m != nil && err == nil {
			m.Undone, m.Removed = asked, time.Now()
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down: %w", err)
	}
	return nil
}

// wait polls the run until it is final, its time bound passes or ctx
// ends; in the last two cases it cancels the run on the server.
func (r *Runner) wait(ctx context.Context, run api.Run, ph Phase, pr *progress, done int) (api.Run, error) {
	poll := r.Poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	bound := waitSlack
	for _, t := range run.Tasks {
		bound += time.Duration(t.TimeoutS * float64(time.Second))
	}
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if run.State != "" && run.State != api.RunRunning {
			pr.update(ph, run, done)
			return run, nil
		}
		select {
		case <-ctx.Done():
			return run, errors.Join(fmt.Errorf("run %s: %w", run.ID, ctx.Err()), r.cancel(ctx, run.ID, "interrupted"))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return run, errors.Join(fmt.Errorf("run %s not finished after %v (the sum of its task timeouts and %v)", run.ID, bound.Round(time.Second), waitSlack),
				r.cancel(ctx, run.ID, "runner gave up waiting"))
		}
		got, err := r.API.GetRun(ctx, run.ID)
		if err != nil {
			if ctx.Err() != nil {
				continue // reported on the next turn
			}
			return run, fmt.Errorf("poll run %s: %w", run.ID, err)
		}
		run = got
		pr.update(ph, run, done)
	}
}

func (r *Runner) cancel(ctx context.Context, id, reason string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := r.API.CancelRun(cctx, id, reason); err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	return nil
}

func newInvocation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}
