package matrix

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
	"github.com/cnperf/cnperf/internal/suite"
)

// agentsN are n nodes' pods.
func agentsN(n int) []suite.Endpoint {
	var eps []suite.Endpoint
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("n%d", i+1)
		eps = append(eps, suite.Endpoint{ID: "uid-" + node, Name: "cnperf-" + node, Node: node, IP: fmt.Sprintf("10.0.%d.2", i), ResponderAddr: fmt.Sprintf("10.0.%d.2:5201", i)})
	}
	return eps
}

// answer is a synthetic result: 10 Gbit/s and 0.1 ms everywhere, except
// bad pairs at a tenth of the rate; flaky pairs are slow only on their
// first measurement.
func answer(st suite.Step, bad, flaky map[string]bool, seen map[string]int) *probe.Result {
	pair := st.Labels[LabelSrc] + ">" + st.Labels[LabelDst]
	bps := 10e9
	if st.Measure == suite.MeasureTCP {
		seen[pair]++
	}
	if bad[pair] || (flaky[pair] && seen[pair] == 1) {
		bps = 1e9
	}
	rtt := &stats.Summary{P50: 0.1, P99: 0.2, Avg: 0.1}
	switch st.Measure {
	case suite.MeasureTCP:
		return &probe.Result{Kind: probe.KindTCP, DurationS: 1, ThroughputBps: &probe.SenderReceiver{Sender: bps, Receiver: bps}}
	case suite.MeasureUDP:
		return &probe.Result{Kind: probe.KindUDP, DurationS: 1, LossPct: probe.Float(0)}
	case suite.MeasureRR:
		return &probe.Result{Kind: probe.KindRR, DurationS: 1, RTTms: rtt}
	}
	return &probe.Result{Kind: probe.KindPing, DurationS: 1, RTTms: rtt, LossPct: probe.Float(0)}
}

// TestSampleCyclesCoverAndConfirm runs the sample plan's cycles as the
// Runner does (Plan, then Follow until it returns nothing) with synthetic
// results and "cycles" left at its default (the window): the run states
// it covers the window, every ordered pair is measured within it, no
// node is in two steps of a phase, a slow pair is an outlier confirmed by
// its re-measure, and a pair slow only once stays a suspect.
func TestSampleCyclesCoverAndConfirm(t *testing.T) {
	const n, k = 8, 2
	w := pairplan.Window(n, k)
	o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"plan": "sample", "peers": "2"}}
	eps := agentsN(n)
	s := Suite{}
	st := s.Announce(eps, o)
	if !strings.Contains(st, fmt.Sprintf("within %d cycles", w)) || !strings.Contains(st, "16 of 56 ordered pairs") {
		t.Fatalf("statement %q does not state the window %d and 16 of 56 pairs a cycle", st, w)
	}
	if want := fmt.Sprintf("this run: cycles 0 to %d, the whole window", w-1); !strings.Contains(st, want) {
		t.Fatalf("statement %q does not say %q", st, want)
	}
	phases, err := s.Plan(eps, o, suite.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{"n2>n5": true}
	flaky := map[string]bool{"n7>n1": true}
	seen := map[string]int{}
	var done []suite.Outcome
	for guard := 0; len(phases) > 0; guard++ {
		if guard > 50 {
			t.Fatal("Follow does not end")
		}
		for _, ph := range phases {
			busy := map[string]string{}
			for _, st := range ph.Steps {
				pair := st.Src.Node + ">" + st.Dst.Node
				for _, node := range []string{st.Src.Node, st.Dst.Node} {
					if other, ok := busy[node]; ok && other != pair {
						t.Fatalf("phase %q: node %s in pairs %s and %s", ph.Name, node, other, pair)
					}
					busy[node] = pair
				}
				done = append(done, suite.Outcome{Step: st, Result: answer(st, bad, flaky, seen)})
			}
		}
		if phases, err = s.Follow(eps, o, suite.Caps{}, done); err != nil {
			t.Fatal(err)
		}
	}
	covered, cycles := map[string]bool{}, map[string]bool{}
	for _, d := range done {
		covered[d.Step.Src.Node+">"+d.Step.Dst.Node] = true
		if d.Step.Labels[LabelConfirm] == "" {
			cycles[d.Step.Labels[LabelCycle]] = true
		}
	}
	if len(cycles) != w {
		t.Errorf("steps of %d cycles, want the window's %d", len(cycles), w)
	}
	if len(covered) != n*(n-1) {
		t.Errorf("%d of %d ordered pairs measured in %d cycles", len(covered), n*(n-1), w)
	}
	rows := s.Rows(done)
	outliers, suspects := map[string]string{}, map[string]string{}
	for _, r := range rows {
		if r.Labels[LabelSrc] == "" {
			continue
		}
		p := r.Labels[LabelSrc] + ">" + r.Labels[LabelDst]
		if why := r.Labels[LabelOutlier]; why != "" {
			outliers[p] = why
		}
		if why := r.Labels[LabelSuspect]; why != "" {
			suspects[p] = why
		}
	}
	if why := outliers["n2>n5"]; !strings.Contains(why, "confirmed") {
		t.Errorf("slow pair n2>n5 not a confirmed outlier: outliers %v", outliers)
	}
	if seen["n2>n5"] < 2 {
		t.Errorf("slow pair measured %d times, want a re-measure", seen["n2>n5"])
	}
	if _, ok := outliers["n7>n1"]; ok || suspects["n7>n1"] == "" {
		t.Errorf("once-slow pair n7>n1: outlier %q, suspect %q; want only a suspect", outliers["n7>n1"], suspects["n7>n1"])
	}
	if len(outliers) != 1 {
		t.Errorf("outliers %v, want only n2>n5", outliers)
	}
}

// TestCyclesSetting: "cycles" defaults to the plan's window and a set
// value overrides it; the statement says which share of the window the
// run covers.
func TestCyclesSetting(t *testing.T) {
	eps := agentsN(8)
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"plan": "sample", "peers": "2"}, "cycles 0 to 3, the whole window"},
		{map[string]string{"plan": "sample", "peers": "2", "cycles": "1"}, "cycles 0 to 0, 1 of the window's 4 cycles"},
		{map[string]string{"plan": "sample", "peers": "3", "cycle": "5"}, "cycles 5 to 7, the whole window"},
		{map[string]string{"plan": "all"}, "this run: cycles 0 to 0, the whole window"},
	} {
		st := Suite{}.Announce(eps, suite.Options{Time: time.Second, Repeat: 1, Set: tc.set})
		if !strings.Contains(st, tc.want) {
			t.Errorf("set %v: statement %q, want it to say %q", tc.set, st, tc.want)
		}
	}
}
