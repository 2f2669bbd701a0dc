package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// fakeAPI is a server that finishes every task on the second poll with a
// result derived from the task's spec and its position, so medians are
// predictable.
type fakeAPI struct {
	mu        sync.Mutex // guards the fields below
	agents    []api.Agent
	runs      map[string]*api.Run
	created   []api.RunCreate
	polls     map[string]int
	cancelled []string
	never     bool // tasks never finish
	failTask  int  // 1-based task index that fails (0: none)
}

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{runs: map[string]*api.Run{}, polls: map[string]int{}}
	for _, e := range labAgents() {
		f.agents = append(f.agents, api.Agent{PodUID: e.ID, PodName: e.Name, NodeName: e.Node, PodIP: e.IP,
			ResponderAddr: e.ResponderAddr, HostNetwork: e.HostNetwork, Status: "free"})
	}
	f.agents = append(f.agents, api.Agent{PodUID: "gone", PodName: "n9-p1", NodeName: "node9", Status: "offline"})
	return f
}

func (f *fakeAPI) Agents(context.Context, bool) ([]api.Agent, error) { return f.agents, nil }

func (f *fakeAPI) CreateRun(_ context.Context, rc api.RunCreate) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, rc)
	id := fmt.Sprintf("run%d", len(f.created))
	run := &api.Run{ID: id, Suite: rc.Suite, State: api.RunRunning, Params: rc.Params, AllowConcurrency: rc.AllowConcurrency}
	// Tasks come back in reverse id order, to check that callers sort.
	for i := len(rc.Tasks) - 1; i >= 0; i-- {
		rt := rc.Tasks[i]
		if rt.Spec.Target != "" {
			return api.Run{}, errors.New("spec.target set")
		}
		spec, _ := json.Marshal(rt.Spec)
		run.Tasks = append(run.Tasks, api.TaskV2{ID: int64(i + 1), TaskID: fmt.Sprintf("%s-t%d", id, i+1), Spec: spec,
			SrcPodUID: rt.Src, DstPodUID: rt.Dst, State: api.StatePending, TimeoutS: 1})
	}
	f.runs[id] = run
	return *run, nil
}

func (f *fakeAPI) GetRun(_ context.Context, id string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.runs[id]
	f.polls[id]++
	if f.never {
		run.Tasks[0].State = api.StateRunning
		return *run, nil
	}
	if f.polls[id] >= 2 {
		for i := range run.Tasks {
			t := &run.Tasks[i]
			var sp probe.Spec
			_ = json.Unmarshal(t.Spec, &sp)
			if int(t.ID) == f.failTask {
				t.State, t.Reason = api.StateFailed, "connection refused"
				continue
			}
			t.State = api.StateSucceeded
			t.Result, _ = json.Marshal(fakeResult(sp.Kind, float64(t.ID)))
		}
		run.State = api.RunSucceeded
	} else {
		run.Tasks[len(run.Tasks)-1].State = api.StateRunning
	}
	return *run, nil
}

func (f *fakeAPI) CancelRun(_ context.Context, id, _ string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return *f.runs[id], nil
}

func fakeResult(kind string, v float64) *probe.Result {
	r := &probe.Result{Kind: kind}
	switch kind {
	case probe.KindTCP:
		r.ThroughputBps = &probe.SenderReceiver{Sender: v * 1e9, Receiver: v * 1e9}
		r.CPUPct = &probe.SenderReceiver{Sender: v, Receiver: v}
		r.Bytes = &probe.SenderReceiver{Sender: v * 1e8, Receiver: v * 1e8}
	case probe.KindUDP:
		r.ThroughputBps = &probe.SenderReceiver{Sender: 5e8, Receiver: 5e8}
		r.LossPct = probe.Float(0)
	case probe.KindRR, probe.KindPing:
		r.RTTms = &probe.Summary{Avg: v / 100, Min: v / 200, Max: v / 50}
	}
	return r
}

func TestRunnerBaseline(t *testing.T) {
	f := newFakeAPI()
	var prog bytes.Buffer
	r := &Runner{API: f, Poll: time.Millisecond, Progress: &prog}
	o := Options{Time: time.Second, Repeat: 3, Backend: "host-gw"}
	rep, err := r.Run(context.Background(), BaselineSuite{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RunIDs) != 1 || rep.RunIDs[0] != "run1" {
		t.Fatalf("run ids %v", rep.RunIDs)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.Rows))
	}
	rc := f.created[0]
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
	if same.Connection != PodPodSameNode || same.Backend != "host-gw" || same.Repetitions != 3 {
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
	again, err := RowsFromRuns(NewRegistry(Builtin()...), stored)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rep.Rows)
	b, _ := json.Marshal(again)
	if !bytes.Equal(a, b) {
		t.Errorf("rows rebuilt from the run differ:\n%s\n%s", a, b)
	}
	var p RunParams
	if err := json.Unmarshal(rc.Params, &p); err != nil || p.Suite != "baseline" || p.Options.Repeat != 3 || len(p.Steps) != len(rc.Tasks) || p.Invocation == "" {
		t.Errorf("params %+v (%v)", p, err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestRunnerFailedStepIsInRow(t *testing.T) {
	f := newFakeAPI()
	f.failTask = 1
	rep, err := (&Runner{API: f, Poll: time.Millisecond}).Run(context.Background(), BaselineSuite{}, Options{Time: time.Second, Repeat: 1})
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

func TestRunnerInterruptCancelsAndTearsDown(t *testing.T) {
	f := newFakeAPI()
	f.never = true
	var calls []string
	s := phasedSuite{setup: func(context.Context, Network) error { calls = append(calls, "setup"); return nil },
		teardown: func(ctx context.Context, _ Network) error {
			if ctx.Err() != nil {
				t.Error("teardown got a cancelled context")
			}
			calls = append(calls, "teardown")
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := (&Runner{API: f, Poll: time.Millisecond}).Run(ctx, s, Options{Time: time.Second, Repeat: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if len(f.cancelled) != 1 || strings.Join(calls, ",") != "setup,teardown" {
		t.Errorf("cancelled %v, calls %v", f.cancelled, calls)
	}
	if !f.created[0].AllowConcurrency {
		t.Error("concurrent phase created without AllowConcurrency")
	}
}

func TestRunnerSetupFailure(t *testing.T) {
	f := newFakeAPI()
	var torn bool
	s := phasedSuite{setup: func(context.Context, Network) error { return errors.New("no tbf") },
		teardown: func(context.Context, Network) error { torn = true; return nil }}
	_, err := (&Runner{API: f, Poll: time.Millisecond}).Run(context.Background(), s, Options{Time: time.Second, Repeat: 1})
	if err == nil || !strings.Contains(err.Error(), "no tbf") || !torn || len(f.created) != 0 {
		t.Errorf("err %v, torn down %v, runs %d", err, torn, len(f.created))
	}
}

// phasedSuite is a one-phase concurrent suite with network changes.
type phasedSuite struct {
	setup, teardown func(context.Context, Network) error
}

func (phasedSuite) Name() string     { return "phased" }
func (phasedSuite) Describe() string { return "test" }
func (s phasedSuite) Plan(eps []Endpoint, o Options, _ Network) ([]Phase, error) {
	steps, err := Baseline(eps, BaselineOptions{Time: o.Time, Repeat: 1, UDPRateBps: 1e6, UDPSize: 100, PingCount: 1})
	return []Phase{{Name: "p", Steps: steps[:2], Concurrent: true, Setup: s.setup, Teardown: s.teardown}}, err
}
func (phasedSuite) Rows(o []Outcome) []Row { return Rows(o) }

func TestRowsFromPlainRun(t *testing.T) {
	r := NewRegistry(Builtin()...)
	if _, err := RowsFromRuns(r, api.Run{ID: "x", Suite: "tasks"}); err == nil || !strings.Contains(err.Error(), "not made by a suite") {
		t.Errorf("plain run: %v", err)
	}
}
