package suite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
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

func TestRunnerInterruptCancelsAndTearsDown(t *testing.T) {
	f := suitetest.NewFakeAPI()
	f.Never = true
	var calls []string
	s := phasedSuite{setup: func(context.Context, suite.Network) error { calls = append(calls, "setup"); return nil },
		teardown: func(ctx context.Context, _ suite.Network) error {
			if ctx.Err() != nil {
				t.Error("teardown got a cancelled context")
			}
			calls = append(calls, "teardown")
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := (&suite.Runner{API: f, Poll: time.Millisecond}).Run(ctx, s, suite.Options{Time: time.Second, Repeat: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if len(f.Cancelled) != 1 || strings.Join(calls, ",") != "setup,teardown" {
		t.Errorf("cancelled %v, calls %v", f.Cancelled, calls)
	}
	if !f.Created[0].AllowConcurrency {
		t.Error("concurrent phase created without AllowConcurrency")
	}
}

func TestRunnerSetupFailure(t *testing.T) {
	f := suitetest.NewFakeAPI()
	var torn bool
	s := phasedSuite{setup: func(context.Context, suite.Network) error { return errors.New("no tbf") },
		teardown: func(context.Context, suite.Network) error { torn = true; return nil }}
	_, err := (&suite.Runner{API: f, Poll: time.Millisecond}).Run(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1})
	if err == nil || !strings.Contains(err.Error(), "no tbf") || !torn || len(f.Created) != 0 {
		t.Errorf("err %v, torn down %v, runs %d", err, torn, len(f.Created))
	}
}

// phasedSuite is a one-phase concurrent suite with network changes.
type phasedSuite struct {
	setup, teardown func(context.Context, suite.Network) error
}

func (phasedSuite) Name() string     { return "phased" }
func (phasedSuite) Describe() string { return "test" }
func (s phasedSuite) Plan(eps []suite.Endpoint, o suite.Options, _ suite.Network) ([]suite.Phase, error) {
	steps, err := baseline.Steps(eps, baseline.Options{Time: o.Time, Repeat: 1, UDPRateBps: 1e6, UDPSize: 100, PingCount: 1})
	return []suite.Phase{{Name: "p", Steps: steps[:2], Concurrent: true, Setup: s.setup, Teardown: s.teardown}}, err
}
func (phasedSuite) Rows(o []suite.Outcome) []suite.Row { return suite.Rows(o) }

func TestRowsFromPlainRun(t *testing.T) {
	r := builtin.Registry()
	if _, err := suite.RowsFromRuns(r, api.Run{ID: "x", Suite: "tasks"}); err == nil || !strings.Contains(err.Error(), "not made by a suite") {
		t.Errorf("plain run: %v", err)
	}
}
