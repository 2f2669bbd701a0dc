package matrix

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestRowsAndFollowWorkIsLinear runs many cycles of the sample plan in
// one run, as the Runner does (Follow given every outcome so far), and
// counts the outcomes and rows Follow and Rows go over: Follow reads
// only the last cycle, whatever the run's length, and Rows goes over
// its outcomes a bounded number of times, not once per cycle or per
// node. Rescanning grows with the square of the run and stalls the
// matrix at a thousand nodes (make bench-matrixsim).
func TestRowsAndFollowWorkIsLinear(t *testing.T) {
	const n, k, cycles = 40, 3, 12
	o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"plan": "sample", "peers": fmt.Sprint(k), "cycles": fmt.Sprint(cycles)}}
	eps := agentsN(n)
	s := Suite{}
	phases, err := s.Plan(eps, o, suite.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{"n2>n5": true, "n9>n1": true, "n30>n17": true}
	seen := map[string]int{}
	var done []suite.Outcome
	for guard := 0; len(phases) > 0; guard++ {
		if guard > cycles+2 {
			t.Fatal("Follow does not end")
		}
		from := len(done)
		for _, ph := range phases {
			for _, st := range ph.Steps {
				done = append(done, suite.Outcome{Step: st, Result: answer(st, bad, nil, seen)})
			}
		}
		scanned.Store(0)
		if phases, err = s.Follow(eps, o, suite.Caps{}, done); err != nil {
			t.Fatal(err)
		}
		// The last cycle's outcomes read to find them (and the one before
		// them, to see where the cycle starts) and again to judge them.
		if got, limit := scanned.Load(), int64(2*(len(done)-from)+1); got > limit {
			t.Errorf("Follow after %d outcomes (%d of the last cycle) went over %d, want at most %d", len(done), len(done)-from, got, limit)
		}
	}
	scanned.Store(0)
	rows := s.Rows(done)
	if got, limit := scanned.Load(), int64(6*len(done)); got > limit {
		t.Errorf("Rows over %d outcomes of %d cycles went over %d outcomes and rows, want at most %d", len(done), cycles, got, limit)
	}
	// The work is bounded, and the judgement still made.
	confirmed := 0
	for _, r := range rows {
		if bad[r.Labels[LabelSrc]+">"+r.Labels[LabelDst]] && r.Labels[LabelOutlier] != "" {
			confirmed++
		}
	}
	if confirmed != len(bad) {
		t.Errorf("%d of the %d slow pairs confirmed as outliers", confirmed, len(bad))
	}
}

// TestPairFiguresMatchMetrics checks PairFigures, which reads a
// result's fields directly, against the figures probe.Metrics names.
func TestPairFiguresMatchMetrics(t *testing.T) {
	rtt := &stats.Summary{P50: 0.1, P99: 0.3, Avg: 0.12}
	for _, tc := range []struct {
		measure string
		r       *probe.Result
	}{
		{suite.MeasureTCP, &probe.Result{Kind: probe.KindTCP, ThroughputBps: &probe.SenderReceiver{Sender: 9e9, Receiver: 8e9}}},
		{suite.MeasureTCP, &probe.Result{Kind: probe.KindTCP}},
		{suite.MeasureUDP, &probe.Result{Kind: probe.KindUDP, LossPct: probe.Float(0)}},
		{suite.MeasureUDP, &probe.Result{Kind: probe.KindUDP, LossPct: probe.Float(2.5), RTTms: rtt}},
		{suite.MeasureRR, &probe.Result{Kind: probe.KindRR, RTTms: rtt}},
		{suite.MeasurePing, &probe.Result{Kind: probe.KindPing, RTTms: rtt, LossPct: probe.Float(0)}},
		{suite.MeasurePing, &probe.Result{Kind: probe.KindPing}},
	} {
		want := map[string]float64{}
		got := probe.Metrics(tc.r)
		for _, f := range pairFigures {
			if v, ok := got[f.from]; ok && f.measure == tc.measure {
				want[f.name] = v
			}
		}
		if have := PairFigures(tc.measure, tc.r); !maps.Equal(have, want) {
			t.Errorf("%s %+v: PairFigures %v, want %v (keys %v)", tc.measure, tc.r, have, want, slices.Sorted(maps.Keys(want)))
		}
	}
}

// TestStatementStatesEveryCycleRounds checks that the rounds the plan
// states are those its cycles have: SampleRoundCount is the number of
// rounds SampleRounds makes, and the statement gives the least and most
// over the window (a cycle with an offset whose permutation has odd
// cycles takes a round more, e.g. an offset of 8 of 1,000 nodes).
func TestStatementStatesEveryCycleRounds(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{8, 2}, {9, 2}, {40, 3}, {100, 3}, {1000, 3}} {
		ring := make([]int, tc.n)
		for i := range ring {
			ring[i] = i
		}
		lo, hi, all := 1<<30, 0, 0
		for c := 0; c < pairplan.Window(tc.n, tc.k); c++ {
			got := len(SampleRounds(ring, tc.k, c))
			if r := SampleRoundCount(tc.n, tc.k, c); r != got {
				t.Fatalf("n=%d k=%d cycle %d: SampleRoundCount %d, SampleRounds made %d", tc.n, tc.k, c, r, got)
			}
			lo, hi, all = min(lo, got), max(hi, got), all+got
		}
		want := fmt.Sprintf("in %d rounds", lo)
		if hi > lo {
			want = fmt.Sprintf("in %d to %d rounds", lo, hi)
		}
		want2 := fmt.Sprintf("within %d cycles (%d rounds)", pairplan.Window(tc.n, tc.k), all)
		if st := Statement(pairplan.PlanSample, tc.n, tc.k, 1, 0); !strings.Contains(st, want) || !strings.Contains(st, want2) {
			t.Errorf("n=%d k=%d: statement %q, want %q and %q", tc.n, tc.k, st, want, want2)
		}
	}
}
