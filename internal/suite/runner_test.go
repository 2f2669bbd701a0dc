package suite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestRunnerBaseline(t *testing.T) {
	f := suitetest.NewFakeAPI()
	var prog bytes.Buffer
	r := &suite.Runner{API: f, Poll: time.Millisecond, Progress: &prog}
	o := suite.Options{Time: time.Second, Repeat: 3, Backend: "host-gw"}
	rep, err := r.Run(context.Background(), baseline.Suite{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RunIDs) != 1 || rep.RunIDs[0] != "run1" {
		t.Fatalf("run ids %v", rep.RunIDs)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.Rows))
	}
	rc := f.Created[0]
	if rc.Suite != "baseline" || len(rc.Tasks) != 3*3*4 {
		t.Fatalf("run create: suite %q, %d tasks", rc.Suite, len(rc.Tasks))
	}
	for i, rt := range rc.Tasks {
		if rt.Src == "gone" || rt.Dst == "gone" || rt.Exclusive == nil || !*rt.Exclusive {
			t.Errorf("task %d: %+v (offline agent, or not exclusive)", i, rt)
		}
	}
	// The TCP step of pod-pod same node is task 1 + 12*rep; its figure is
	// the task id in Gbit/s, so the median is the middle repetition's.
	same := rep.Rows[0]
	if same.Connection != suite.PodPodSameNode || same.Backend != "host-gw" || same.Repetitions != 3 {
		t.Fatalf("first row %+v", same)
	}
	for _, c := range []struct {
		name          string
		med, min, max float64
	}{
		{"throughput_bps.receiver", 13e9, 1e9, 25e9},
		{"cpu_pct.sender", 13, 1, 25},
		{"rtt_ms.avg", 0.15, 0.03, 0.27},
		{"ping.rtt_ms.avg", 0.16, 0.04, 0.28},
	} {
		if !near(same.Median[c.name], c.med) || !near(same.Min[c.name], c.min) || !near(same.Max[c.name], c.max) {
			t.Errorf("%s: median %v min %v max %v, want %v %v %v", c.name, same.Median[c.name], same.Min[c.name], same.Max[c.name], c.med, c.min, c.max)
		}
	}
	// The stored run alone rebuilds the same rows.
	stored, _ := f.GetRun(context.Background(), "run1")
	again, err := suite.RowsFromRuns(builtin.Registry(), stored)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rep.Rows)
	b, _ := json.Marshal(again)
	if !bytes.Equal(a, b) {
		t.Errorf("rows rebuilt from the run differ:\n%s\n%s", a, b)
	}
	var p suite.RunParams
	if err := json.Unmarshal(rc.Params, &p); err != nil || p.Suite != "baseline" || p.Options.Repeat != 3 || len(p.Steps) != len(rc.Tasks) || p.Invocation == "" {
		t.Errorf("params %+v (%v)", p, err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestRunnerFailedStepIsInRow(t *testing.T) {
	f := suitetest.NewFakeAPI()
	f.FailTask = 1
	rep, err := (&suite.Runner{API: f, Poll: time.Millisecond}).Run(context.Background(), baseline.Suite{}, suite.Options{Time: time.Second, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if errs := rep.Rows[0].Errors; len(errs) != 1 || !strings.Contains(errs[0], "connection refused") || !strings.Contains(errs[0], "tcp #1") {
		t.Errorf("errors of the first row: %v", errs)
	}
	if _, ok := rep.Rows[0].Median["throughput_bps.receiver"]; ok {
		t.Error("a figure from a failed step")
	}
}

// fakeEnv records the changes it makes and undoes; every capability but
// police is there.
type fakeEnv struct {
	mu      sync.Mutex // guards calls
	calls   []string
	fail    string // a member whose change fails
	checked []string
	fors    []time.Duration // each applied change's For
	t       *testing.T
	// late is how long the undo of a change made while the run ran takes
	// (a removal that takes effect late: the undo waits for it); undoErr,
	// when set, is its error (it never took effect).
	late     time.Duration
	undoErr  string
	finished int
}

// Finish implements suite.Finisher.
func (e *fakeEnv) Finish(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finished++
	return nil
}

func (e *fakeEnv) Caps() suite.Caps {
	return suite.Caps{Have: []suite.Cap{suite.CapNodeQdisc, suite.CapPodQdisc, suite.CapPodShaping},
		Why: map[suite.Cap]string{suite.CapPolice: "this kernel has no act_police"}}
}

func (e *fakeEnv) Apply(_ context.Context, c suite.Change) (func(context.Context) error, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.Member == e.fail {
		return nil, errors.New("no tbf")
	}
	e.calls = append(e.calls, "apply "+c.Member)
	e.fors = append(e.fors, c.For)
	return func(ctx context.Context) error {
		if ctx.Err() != nil {
			e.t.Error("undo got a cancelled context")
		}
		if c.After > 0 {
			time.Sleep(e.late)
			if e.undoErr != "" {
				return errors.New(e.undoErr)
			}
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.calls = append(e.calls, "undo "+c.Member)
		return nil
	}, nil
}

func (e *fakeEnv) Check(_ context.Context, c suite.Change) error {
	e.checked = append(e.checked, c.Member)
	if c.Member == "unknown" {
		return errors.New("no such link")
	}
	return nil
}

func TestRunnerInterruptCancelsAndUndoes(t *testing.T) {
	f := suitetest.NewFakeAPI()
	f.Never = true
	env := &fakeEnv{t: t}
	s := phasedSuite{changes: []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"}, {What: suite.CapPodQdisc, Member: "n2-p1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := (&suite.Runner{API: f, Env: env, Poll: time.Millisecond}).Run(ctx, s, suite.Options{Time: time.Second, Repeat: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if got := strings.Join(env.calls, ","); len(f.Cancelled) != 1 || got != "apply node2,apply n2-p1,undo n2-p1,undo node2" {
		t.Errorf("cancelled %v, calls %v (want applied in order, undone in reverse)", f.Cancelled, got)
	}
	if !f.Created[0].AllowConcurrency {
		t.Error("concurrent phase created without AllowConcurrency")
	}
	// Each change learns how long the phase needs it: its longest step
	// (the baseline's 1 s tcp and udp flows).
	if len(env.fors) != 2 || env.fors[0] != time.Second || env.fors[1] != time.Second {
		t.Errorf("changes applied for %v, want the phase's 1s", env.fors)
	}
}

// TestRunnerMakesLaterChangesWhileRunning: a change with After is made
// that long after the run is created, while it runs, and undone first; a
// change not yet due when the run ends is never made.
func TestRunnerMakesLaterChangesWhileRunning(t *testing.T) {
	f := suitetest.NewFakeAPI()
	f.Never = true
	env := &fakeEnv{t: t}
	s := phasedSuite{changes: []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"},
		{What: suite.CapPodQdisc, Member: "n2-p1", After: 20 * time.Millisecond},
		{What: suite.CapPodQdisc, Member: "n1-p1", After: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&suite.Runner{API: f, Env: env, Poll: time.Millisecond}).Run(ctx, s, suite.Options{Time: time.Second, Repeat: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("the run waited %v for a change not yet due", time.Since(start))
	}
	if got := strings.Join(env.calls, ","); len(f.Created) != 1 || got != "apply node2,apply n2-p1,undo n2-p1,undo node2" {
		t.Errorf("runs %d, calls %v (want the later change made after the run and undone first, the one not due never)", len(f.Created), got)
	}
}

// TestRunnerTellsWhenLaterChangesWereMade: each outcome of a phase says
// when its changes made while the steps ran were asked for and made, so a
// suite can set them beside the steps' timelines.
func TestRunnerTellsWhenLaterChangesWereMade(t *testing.T) {
	f := suitetest.NewFakeAPI()
	env := &fakeEnv{t: t}
	s := phasedSuite{changes: []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"},
		{What: suite.CapPodQdisc, Member: "n2-p1", After: 5 * time.Millisecond}}}
	start := time.Now()
	rep, err := (&suite.Runner{API: f, Env: env, Poll: 100 * time.Millisecond}).Run(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) == 0 {
		t.Fatal("no outcomes")
	}
	for _, o := range rep.Outcomes {
		if len(o.Made) != 1 || o.Made[0].Change.Member != "n2-p1" || o.Made[0].Asked.Before(start.Add(5*time.Millisecond)) || o.Made[0].Made.Before(o.Made[0].Asked) {
			t.Errorf("outcome %s: made %+v, want n2-p1 asked 5 ms or more after %v", o.Step.Measure, o.Made, start)
		}
	}
	// Reports are made from the runs: the run's params carry the times.
	_, outs, err := suite.OutcomesFromRun(rep.Runs[0])
	if err != nil || len(outs) == 0 || len(outs[0].Made) != 1 || !outs[0].Made[0].Asked.Equal(rep.Outcomes[0].Made[0].Asked) {
		t.Errorf("outcomes from the run %+v (%v), want the change's times", outs, err)
	}
}

// TestRunnerTimesTheUndoOfLaterChanges: a change made while the steps
// ran is undone once they end, before the outcomes are made, and its
// record says when the undo was asked for and when it returned (an
// environment's undo returns once the removal is in effect: here 150 ms
// late), also in the run's params; an undo that fails fails the run
// naming the phase, and the environment is finished once either way.
func TestRunnerTimesTheUndoOfLaterChanges(t *testing.T) {
	f := suitetest.NewFakeAPI()
	env := &fakeEnv{t: t, late: 150 * time.Millisecond}
	s := phasedSuite{changes: []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"},
		{What: suite.CapPodQdisc, Member: "n2-p1", After: 5 * time.Millisecond}}}
	rep, err := (&suite.Runner{API: f, Env: env, Poll: 10 * time.Millisecond}).Run(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) == 0 || len(rep.Runs) != 1 {
		t.Fatalf("%d outcomes, %d runs", len(rep.Outcomes), len(rep.Runs))
	}
	m := rep.Outcomes[0].Made
	if len(m) != 1 || m[0].Undone.Before(m[0].Made) || m[0].Removed.Sub(m[0].Undone) < 150*time.Millisecond {
		t.Errorf("made %+v, want undone after made and removed 150 ms or more after undone", m)
	}
	_, outs, err := suite.OutcomesFromRun(rep.Runs[0])
	if err != nil || len(outs) == 0 || len(outs[0].Made) != 1 || !outs[0].Made[0].Removed.Equal(m[0].Removed) {
		t.Errorf("outcomes from the run %+v (%v), want the undo's times", outs, err)
	}
	if env.finished != 1 {
		t.Errorf("finished %d times, want once", env.finished)
	}

	env = &fakeEnv{t: t, undoErr: "pod n2-p1 still cannot connect"}
	_, err = (&suite.Runner{API: suitetest.NewFakeAPI(), Env: env, Poll: 10 * time.Millisecond}).Run(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err == nil || !strings.Contains(err.Error(), "still cannot connect") || !strings.Contains(err.Error(), "phase") || env.finished != 1 {
		t.Errorf("err %v, finished %d; want the undo's error with the phase, finished once", err, env.finished)
	}
}

func TestRunnerApplyFailureUndoesWhatWasMade(t *testing.T) {
	f := suitetest.NewFakeAPI()
	env := &fakeEnv{t: t, fail: "n2-p1"}
	s := phasedSuite{changes: []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"}, {What: suite.CapPodQdisc, Member: "n2-p1"}}}
	_, err := (&suite.Runner{API: f, Env: env, Poll: time.Millisecond}).Run(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err == nil || !strings.Contains(err.Error(), "no tbf") || strings.Join(env.calls, ",") != "apply node2,undo node2" || len(f.Created) != 0 {
		t.Errorf("err %v, calls %v, runs %d", err, env.calls, len(f.Created))
	}
}

// TestRunnerRefusesUpFront: a change the environment lacks the capability
// for, or one it finds will not take, refuses the suite before any change
// or run is made, naming what is missing.
func TestRunnerRefusesUpFront(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     suite.Env
		changes []suite.Change
		want    []string
	}{
		{"no environment", nil, []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"}},
			[]string{"node-qdisc (put a qdisc on a node's uplink)", "cnperf lab run"}},
		{"lacks police", &fakeEnv{}, []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"}, {What: suite.CapPolice, Member: "n2-p1"}},
			[]string{"police (police a pod's traffic with the kernel's police action): this kernel has no act_police"}},
		{"check fails", &fakeEnv{}, []suite.Change{{What: suite.CapNodeQdisc, Member: "node2"}, {What: suite.CapPodQdisc, Member: "unknown"}},
			[]string{"pod-qdisc on unknown: no such link"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := suitetest.NewFakeAPI()
			_, err := (&suite.Runner{API: f, Env: c.env, Poll: time.Millisecond}).Run(context.Background(), phasedSuite{changes: c.changes}, suite.Options{Time: time.Second, Repeat: 1})
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want it to say %q", err, w)
				}
			}
			if len(f.Created) != 0 {
				t.Errorf("%d runs created", len(f.Created))
			}
			if fe, ok := c.env.(*fakeEnv); ok && len(fe.calls) != 0 {
				t.Errorf("changes made: %v", fe.calls)
			}
		})
	}
	_, err := (&suite.Runner{API: suitetest.NewFakeAPI()}).Run(context.Background(), phasedSuite{changes: []suite.Change{{What: suite.CapVXLANTOS, Member: "node1"}}}, suite.Options{Time: time.Second, Repeat: 1})
	if !errors.Is(err, suite.ErrEnvLacks) {
		t.Errorf("err %v is not ErrEnvLacks", err)
	}
}

// phasedSuite is a one-phase concurrent suite with network changes.
type phasedSuite struct {
	changes []suite.Change
}

func (phasedSuite) Name() string     { return "phased" }
func (phasedSuite) Describe() string { return "test" }
func (s phasedSuite) Plan(eps []suite.Endpoint, o suite.Options, _ suite.Caps) ([]suite.Phase, error) {
	steps, err := baseline.Steps(eps, baseline.Options{Time: o.Time, Repeat: 1, UDPRateBps: 1e6, UDPSize: 100, PingCount: 1})
	return []suite.Phase{{Name: "p", Steps: steps[:2], Concurrent: true, Changes: s.changes}}, err
}
func (phasedSuite) Rows(o []suite.Outcome) []suite.Row { return suite.Rows(o) }

func TestRowsFromPlainRun(t *testing.T) {
	r := builtin.Registry()
	if _, err := suite.RowsFromRuns(r, api.Run{ID: "x", Suite: "tasks"}); err == nil || !strings.Contains(err.Error(), "not made by a suite") {
		t.Errorf("plain run: %v", err)
	}
}

// labelledEnv is an environment that knows its nodes' labels.
type labelledEnv struct {
	fakeEnv
	labels map[string]map[string]string
}

func (e *labelledEnv) NodeLabels(context.Context) (map[string]map[string]string, error) {
	return e.labels, nil
}

// TestRunnerGivesNodeLabels: an environment's node labels reach the
// suite on the endpoints of their nodes; without a NodeLabeler there are
// none.
func TestRunnerGivesNodeLabels(t *testing.T) {
	env := &labelledEnv{fakeEnv: fakeEnv{t: t}, labels: map[string]map[string]string{"node1": {"zone": "a"}}}
	for _, tc := range []struct {
		env  suite.Env
		want string
	}{{env, "a"}, {&fakeEnv{t: t}, ""}} {
		eps, _, err := (&suite.Runner{API: suitetest.NewFakeAPI(), Env: tc.env}).Plan(context.Background(), phasedSuite{}, suite.Options{Time: time.Second, Repeat: 1})
		if err != nil {
			t.Fatal(err)
		}
		on := 0
		for _, e := range eps {
			want := ""
			if e.Node == "node1" {
				want = tc.want
				on++
			}
			if got, _ := e.NodeLabel("zone"); got != want {
				t.Errorf("%s on %s: zone %q, want %q", e.Name, e.Node, got, want)
			}
		}
		if on == 0 {
			t.Fatal("no endpoint on node1")
		}
	}
}
