package capacity

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// modelPath loses what is sent above its capacity; noise adds loss to
// the first n runs at any rate.
type modelPath struct {
	capacity float64
	noisy    int
	runs     int
}

func (m *modelPath) run(rate uint64) (loss, recv float64) {
	m.runs++
	r := float64(rate)
	recv = math.Min(r, m.capacity)
	loss = 100 * (r - recv) / r
	if m.runs <= m.noisy {
		loss += 0.5
	}
	return loss, recv
}

func TestCapacitySearchFindsTheKnee(t *testing.T) {
	for _, c := range []struct {
		name     string
		capacity float64
		o        Options
	}{
		{"above start", 940e6, Options{}},
		{"below start", 9.5e6, Options{}},
		{"far above", 13e9, Options{}},
		{"tight precision", 250e6, Options{Precision: 0.01, MaxTrials: 30}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewSearch(c.o)
			if err != nil {
				t.Fatal(err)
			}
			m := &modelPath{capacity: c.capacity}
			for i := 0; ; i++ {
				spec, _, ok := s.Next()
				if !ok {
					break
				}
				if i > 60 {
					t.Fatal("search does not end")
				}
				s.Observe(m.run(*spec.RateBps))
			}
			r := s.Row()
			prec := c.o.withDefaults().Precision
			if got := float64(r.CapacityBps); got > c.capacity || got < c.capacity/(1+prec)/(1+prec) {
				t.Errorf("capacity %.4g, want within %g of %.4g (trials %+v)", got, prec, c.capacity, r.Trials)
			}
			if !r.RetestPass || r.RetestLossPct == nil || *r.RetestLossPct >= 0.1 || len(r.Errors) != 0 {
				t.Errorf("re-test %+v errors %v", r.RetestLossPct, r.Errors)
			}
			if n := len(r.Trials); n > c.o.withDefaults().MaxTrials+c.o.withDefaults().Retests {
				t.Errorf("%d trials", n)
			}
		})
	}
}

func TestCapacitySearchRetestStepsDown(t *testing.T) {
	s, _ := NewSearch(Options{})
	m := &modelPath{capacity: 500e6}
	retests := 0
	for {
		spec, retest, ok := s.Next()
		if !ok {
			break
		}
		loss, recv := m.run(*spec.RateBps)
		if retest {
			retests++
			if retests == 1 {
				loss = 0.4 // a noisy first re-test
			}
			if spec.Duration.D() != 3*time.Second {
				t.Errorf("re-test for %v", spec.Duration.D())
			}
		}
		s.Observe(loss, recv)
	}
	r := s.Row()
	if retests != 2 || !r.RetestPass {
		t.Fatalf("%d re-tests, pass %v: %+v", retests, r.RetestPass, r.Trials)
	}
	last := r.Trials[len(r.Trials)-1]
	prev := r.Trials[len(r.Trials)-2]
	if math.Abs(float64(last.RateBps)-0.9*float64(prev.RateBps)) > 1 || r.CapacityBps != last.RateBps {
		t.Errorf("after a failed re-test at %d, re-tested at %d (want 10 %% lower), capacity %d", prev.RateBps, last.RateBps, r.CapacityBps)
	}
}

func TestCapacitySearchNothingPasses(t *testing.T) {
	s, _ := NewSearch(Options{})
	for i := 0; i < 100; i++ {
		spec, _, ok := s.Next()
		if !ok {
			break
		}
		s.Observe(5, float64(*spec.RateBps)*0.95)
	}
	r := s.Row()
	if r.CapacityBps != 0 || len(r.Errors) == 0 || !strings.Contains(r.Errors[0], "no rate down to 1 Mbit/s") {
		t.Errorf("row %+v", r)
	}
}

func TestCapacityBadInput(t *testing.T) {
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"loss": "0"}, "loss above 0"},
		{map[string]string{"start": "0"}, "rate 0"},
		{map[string]string{"min": "2G", "start": "1G"}, "want min"},
		{map[string]string{"precision": "0"}, "precision"},
		{map[string]string{"trial-time": "10ms"}, "at least 200ms"},
		{map[string]string{"speed": "1"}, "unknown setting speed"},
		{map[string]string{"paths": "cross-node,far-away"}, `path "far-away"`},
	} {
		_, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: 2 * time.Second, Repeat: 1, Set: c.set}, suite.Caps{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.set, err, c.want)
		}
	}
}

// TestCapacitySuiteFollow drives the suite as the Runner does: Plan, then
// Follow with every outcome so far until it plans nothing; Rows then
// replays the search from the outcomes alone.
func TestCapacitySuiteFollow(t *testing.T) {
	caps := map[string]float64{suite.PodPodSameNode: 5e9, suite.PodPodCrossNode: 97e6, suite.NodeNode: 3e9}
	paths := map[string]*modelPath{}
	for k, v := range caps {
		paths[k] = &modelPath{capacity: v}
	}
	o := suite.Options{Time: time.Second, Repeat: 1, Backend: "host-gw", Set: map[string]string{"loss": "0.1"}}
	s := Suite{}
	phases, err := s.Plan(suitetest.LabAgents(), o, suite.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	var done []suite.Outcome
	for round := 0; len(phases) > 0; round++ {
		if round > 40 {
			t.Fatal("search does not end")
		}
		for _, ph := range phases {
			for _, st := range ph.Steps {
				if !st.Exclusive {
					t.Errorf("capacity step not exclusive")
				}
				loss, recv := paths[st.Connection].run(*st.Spec.RateBps)
				done = append(done, suite.Outcome{Step: st, Result: &probe.Result{LossPct: &loss, ThroughputBps: &probe.SenderReceiver{Receiver: recv}}})
			}
		}
		if phases, err = s.Follow(suitetest.LabAgents(), o, suite.Caps{}, done); err != nil {
			t.Fatal(err)
		}
	}
	one, err := s.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"paths": "cross-node"}}, suite.Caps{})
	if err != nil || len(one) != 1 || len(one[0].Steps) != 1 || one[0].Steps[0].Connection != suite.PodPodCrossNode {
		t.Errorf("paths=cross-node: %v %+v", err, one)
	}
	rows := s.Rows(done)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		c := caps[r.Connection]
		if got := r.Median["capacity_bps"]; got > c || got < c/1.1 {
			t.Errorf("%s: capacity %.4g, want about %.4g", r.Connection, got, c)
		}
		if r.Median["retest_pass"] != 1 || r.Median["retest_loss_pct"] >= 0.1 {
			t.Errorf("%s: re-test %v", r.Connection, r.Median)
		}
		if len(r.Series["trial_rate_bps"]) != int(r.Median["trials"]) {
			t.Errorf("%s: series", r.Connection)
		}
	}
	if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, "pod-pod cross node") || !strings.Contains(txt, " pass ") {
		t.Errorf("table:\n%s", txt)
	}
}

// TestRunnerFollowsTheSearch runs capacity through the Runner against a
// fake server whose UDP runs never lose: the search doubles up to its
// maximum and re-tests there, one run per round.
func TestRunnerFollowsTheSearch(t *testing.T) {
	f := suitetest.NewFakeAPI()
	r := &suite.Runner{API: f, Poll: time.Millisecond}
	o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"paths": "cross-node", "max": "1G"}}
	rep, err := r.Run(context.Background(), Suite{}, o)
	if err != nil {
		t.Fatal(err)
	}
	// 100M, 200M, 400M, 800M, 1G (the maximum), then the re-test at 1G.
	if len(f.Created) != 6 || len(rep.RunIDs) != 6 {
		t.Fatalf("%d runs, want 6", len(f.Created))
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Median["capacity_bps"] != 1e9 || rep.Rows[0].Median["retest_pass"] != 1 {
		t.Errorf("rows %+v", rep.Rows)
	}
}

// TestOffloadSetting: the search's udp probes use offload auto unless
// --set offload=off; anything else is refused.
func TestOffloadSetting(t *testing.T) {
	cases := []struct {
		set, want, err string
	}{
		{"", probe.OffloadAuto, ""},
		{"off", probe.OffloadOff, ""},
		{"auto", probe.OffloadAuto, ""},
		{"on", "", "offload"},
	}
	for _, tc := range cases {
		t.Run("offload="+tc.set, func(t *testing.T) {
			o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"paths": "cross-node"}}
			if tc.set != "" {
				o.Set["offload"] = tc.set
			}
			phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suite.Caps{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Plan = %v, want an error about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := phases[0].Steps[0].Spec.Offload; got != tc.want {
				t.Errorf("spec offload %q, want %q", got, tc.want)
			}
		})
	}
}
