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
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"golang.org/x/sys/unix"
)

// ParamsAPIVersion is the apiVersion of the params a suite's run carries.
const ParamsAPIVersion = "cnperf/v1"

// RunParams is what the Runner stores in each run's params
// (api.RunCreate.Params): enough to rebuild the suite's rows from the
// stored run alone. Steps[i] is the step of the run's i-th task (tasks in
// creation order, that is by id).
type RunParams struct {
	APIVersion string `json:"apiVersion"`
	Suite      string `json:"suite"`
	// Invocation is shared by the runs of one Runner.Run call (the phases
	// of one suite run, and the backends of one cni-compare in the lab).
	Invocation string  `json:"invocation"`
	Phase      string  `json:"phase"`
	PhaseIndex int     `json:"phase_index"` // 0-based
	Phases     int     `json:"phases"`
	Options    Options `json:"options"`
	Steps      []Step  `json:"steps"`
}

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
	// Network is the lab under the run, nil against a real cluster.
	Network Network
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
	// Outcomes are the steps with their results, in plan order.
	Outcomes []Outcome `json:"-"`
}

// maxPhases bounds the phases of one suite run (a Follower's search).
const maxPhases = 1000

// progressAfter is how long a run goes before the progress line appears.
const progressAfter = 2 * time.Second

// waitSlack is added to the sum of a run's task timeouts to bound the wait.
const waitSlack = 60 * time.Second

// Run plans s for the agents online now and runs its phases one after
// another, each as one run on the server, then aggregates the rows. When
// ctx ends the current run is cancelled on the server and Teardown still
// runs. A step that failed is in its row's Errors; Run fails only when the
// suite could not be run at all.
func (r *Runner) Run(ctx context.Context, s Suite, o Options) (Report, error) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := Report{Suite: s.Name(), Options: o}
	agents, err := r.API.Agents(ctx, false)
	if err != nil {
		return rep, fmt.Errorf("list agents: %w", err)
	}
	eps := Endpoints(agents)
	phases, err := s.Plan(eps, o, r.Network)
	if err != nil {
		return rep, err
	}
	if len(phases) == 0 {
		return rep, fmt.Errorf("suite %s planned nothing for %d agents", s.Name(), len(eps))
	}
	inv := r.Invocation
	if inv == "" {
		inv = newInvocation()
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
			PhaseIndex: i, Phases: len(phases), Options: o, Steps: ph.Steps}
		outs, id, err := r.runPhase(ctx, ph, params, pr, done)
		if id != "" {
			rep.RunIDs = append(rep.RunIDs, id)
		}
		rep.Outcomes = append(rep.Outcomes, outs...)
		if err != nil {
			return rep, fmt.Errorf("suite %s, phase %q: %w", s.Name(), ph.Name, err)
		}
		log.Info("phase done", "suite", s.Name(), "phase", ph.Name, "run_id", id)
		done += len(ph.Steps)
		if i == len(phases)-1 && follower != nil {
			// A searching suite plans its next round from what it has.
			more, err := follower.Follow(eps, o, r.Network, rep.Outcomes)
			if err != nil {
				return rep, fmt.Errorf("suite %s, after phase %q: %w", s.Name(), ph.Name, err)
			}
			if len(phases)+len(more) > maxPhases {
				return rep, fmt.Errorf("suite %s planned more than %d phases", s.Name(), maxPhases)
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

// runPhase sets the network up, creates the phase's run, waits for it and
// tears the network down again.
func (r *Runner) runPhase(ctx context.Context, ph Phase, params RunParams, pr *progress, done int) (outs []Outcome, id string, err error) {
	if ph.Setup != nil {
		if err := ph.Setup(ctx, r.Network); err != nil {
			err = fmt.Errorf("set up: %w", err)
			if ph.Teardown != nil {
				err = errors.Join(err, r.teardown(ctx, ph))
			}
			return nil, "", err
		}
	}
	if ph.Teardown != nil {
		defer func() { err = errors.Join(err, r.teardown(ctx, ph)) }()
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, "", fmt.Errorf("encode params: %w", err)
	}
	rc := api.RunCreate{Suite: params.Suite, AllowConcurrency: ph.Concurrent, Params: raw}
	for _, st := range ph.Steps {
		rc.Tasks = append(rc.Tasks, st.Task())
	}
	run, err := r.API.CreateRun(ctx, rc)
	if err != nil {
		return nil, "", fmt.Errorf("create run: %w", err)
	}
	run, err = r.wait(ctx, run, ph, pr, done)
	if err != nil {
		return nil, run.ID, err
	}
	outs, err = outcomes(run, ph.Steps)
	return outs, run.ID, err
}

// teardown runs the phase's Teardown with a fresh bounded context, so that
// an interrupted run still undoes its network changes.
func (r *Runner) teardown(ctx context.Context, ph Phase) error {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := ph.Teardown(tctx, r.Network); err != nil {
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

// outcomes pairs the run's tasks (by id order) with the steps.
func outcomes(run api.Run, steps []Step) ([]Outcome, error) {
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	if len(tasks) != len(steps) {
		return nil, fmt.Errorf("run %s has %d tasks for %d steps", run.ID, len(tasks), len(steps))
	}
	out := make([]Outcome, len(steps))
	for i, t := range tasks {
		out[i] = Outcome{Step: steps[i]}
		if t.State != api.StateSucceeded {
			msg := t.State
			if t.Reason != "" {
				msg += ": " + t.Reason
			}
			out[i].Err = msg
			continue
		}
		if len(t.Result) == 0 {
			out[i].Err = "succeeded without a result"
			continue
		}
		var res probe.Result
		if err := json.Unmarshal(t.Result, &res); err != nil {
			out[i].Err = fmt.Sprintf("result of task %s: %v", t.TaskID, err)
			continue
		}
		out[i].Result = &res
	}
	return out, nil
}

// OutcomesFromRun rebuilds the outcomes of a stored run from its params
// and tasks (the run as GET /api/v2/runs/ID returns it, tasks included).
func OutcomesFromRun(run api.Run) (RunParams, []Outcome, error) {
	var p RunParams
	if len(run.Params) == 0 {
		return p, nil, fmt.Errorf("run %s (suite %q) carries no suite params: it was not made by a suite", run.ID, run.Suite)
	}
	if err := json.Unmarshal(run.Params, &p); err != nil {
		return p, nil, fmt.Errorf("run %s: params: %w", run.ID, err)
	}
	if p.APIVersion != ParamsAPIVersion {
		return p, nil, fmt.Errorf("run %s: params apiVersion %q, want %q", run.ID, p.APIVersion, ParamsAPIVersion)
	}
	outs, err := outcomes(run, p.Steps)
	return p, outs, err
}

// RowsFromRuns rebuilds a suite's rows from stored runs (all of one suite:
// the phases of one run, or the backends of a cni-compare), with the
// suite's own Rows, as `cnperf report RUN_ID` needs.
func RowsFromRuns(reg *Registry, runs ...api.Run) ([]Row, error) {
	if len(runs) == 0 {
		return nil, errors.New("no run given")
	}
	var (
		suite string
		all   []Outcome
	)
	for _, run := range runs {
		p, outs, err := OutcomesFromRun(run)
		if err != nil {
			return nil, err
		}
		if suite != "" && p.Suite != suite {
			return nil, fmt.Errorf("runs of different suites (%s, %s) cannot share one table", suite, p.Suite)
		}
		suite = p.Suite
		all = append(all, outs...)
	}
	s, err := reg.Get(suite)
	if err != nil {
		return nil, err
	}
	return s.Rows(all), nil
}

func newInvocation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}

// optionsJSON is Options on the wire: the time as a duration string.
type optionsJSON struct {
	Time    probe.Duration    `json:"time"`
	Repeat  int               `json:"repeat"`
	Backend string            `json:"backend,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
}

// MarshalJSON writes the time as a duration string ("5s").
func (o Options) MarshalJSON() ([]byte, error) {
	return json.Marshal(optionsJSON{Time: probe.Duration(o.Time), Repeat: o.Repeat, Backend: o.Backend, Set: o.Set})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Options) UnmarshalJSON(b []byte) error {
	var j optionsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = Options{Time: j.Time.D(), Repeat: j.Repeat, Backend: j.Backend, Set: j.Set}
	return nil
}

// progress writes the progress line.
type progress struct {
	w       io.Writer
	suite   string
	total   int
	start   time.Time
	tty     bool
	last    string
	written bool
}

func newProgress(w io.Writer, suite string, total int) *progress {
	return &progress{w: w, suite: suite, total: total, start: time.Now(), tty: isTerminal(w)}
}

// update shows what runs now in phase ph (whose steps start at done).
func (p *progress) update(ph Phase, run api.Run, done int) {
	if p.w == nil || time.Since(p.start) < progressAfter {
		return
	}
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	finished := 0
	var now []string
	for i, t := range tasks {
		if api.TerminalState(t.State) {
			finished++
			continue
		}
		if (t.State == api.StateRunning || t.State == api.StateDispatched) && i < len(ph.Steps) {
			st := ph.Steps[i]
			now = append(now, fmt.Sprintf("%s %s #%d (%s → %s)", st.Measure, st.Connection, st.Repeat+1, EndpointLabel(st.Src), EndpointLabel(st.Dst)))
		}
	}
	if len(run.Tasks) == 0 {
		finished = run.Counts[api.StateSucceeded] + run.Counts[api.StateFailed] + run.Counts[api.StateTimedOut] + run.Counts[api.StateCancelled]
	}
	left := p.total - done - finished
	what := "waiting for agents"
	switch {
	case len(now) > 0:
		what = strings.Join(now, ", ")
	case left == 0:
		what = "done"
	}
	key := fmt.Sprintf("%s: %s; %d of %d left", p.suite, what, left, p.total)
	line := fmt.Sprintf("%s; %s elapsed", key, time.Since(p.start).Round(time.Second))
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	case key != p.last:
		// Not a terminal (a log, CI): a line per change, not per poll.
		fmt.Fprintln(p.w, line)
	}
	p.last = key
	p.written = true
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// finish ends the progress line on a terminal.
func (p *progress) finish() {
	if p.tty && p.written {
		fmt.Fprintln(p.w)
	}
}
