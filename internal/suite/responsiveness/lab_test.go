package responsiveness_test

import (
	"math"
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/responsiveness"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestResponsivenessLab runs the suite on a lab with a 100 Mbit/s FIFO on
// the sending node's uplink: a row per path, each with idle and loaded
// round trips (p50, p99), RPM and the streams' rates, a place for the
// queue and a verdict; the paths between nodes carry the FIFO's full
// delay (250,000 B at 100 Mbit/s: 20 ms) and the delay its queue held,
// the same node none. How close the rise comes to each is the machine's
// figure (figure.Check; make bench-lab enforces it).
func TestResponsivenessLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "responsiveness", "--time", "2s", "--pods-per-node", "2",
		"--set", "bottleneck=100M", "--set", "paths=same-node,cross-node,node-node")
	want := []string{suite.PodPodSameNode, suite.PodPodCrossNode, suite.NodeNode}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want one per path %v", len(rows), want)
	}
	for i, r := range rows {
		if r["connection"] != want[i] {
			t.Errorf("row %d is %v, want %s", i, r["connection"], want[i])
		}
		for _, name := range []string{responsiveness.FigIdleP50, responsiveness.FigIdleP99, responsiveness.FigLoadedP50,
			responsiveness.FigLoadedP99, responsiveness.FigRPMIdle, responsiveness.FigRPMLoaded, responsiveness.FigForward, responsiveness.FigBack} {
			v, ok := cnperftest.Num(r, name)
			if !ok || v < 0 || math.IsInf(v, 0) {
				t.Errorf("%v: %s = %v (%v), want a figure >= 0", r["connection"], name, v, ok)
			}
		}
		if p50, _ := cnperftest.Num(r, responsiveness.FigLoadedP50); p50 <= 0 {
			t.Errorf("%v: loaded p50 %v, want a round trip", r["connection"], p50)
		}
		if r[responsiveness.LabelQueueAt] == "" || r[responsiveness.LabelVerdict] == "" {
			t.Errorf("%v: queue at %q, verdict %q; want both", r["connection"], r[responsiveness.LabelQueueAt], r[responsiveness.LabelVerdict])
		}
		full, hasFull := cnperftest.Num(r, responsiveness.FigFullDelay)
		between := want[i] != suite.PodPodSameNode
		if between != hasFull || (hasFull && math.Abs(full-20) > 1e-9) {
			t.Errorf("%v: full queue delay %v (%v), want 20 ms only on paths between nodes", r["connection"], full, hasFull)
		}
		// The FIFO's mean backlog cannot exceed its limit.
		exp, hasExp := cnperftest.Num(r, responsiveness.FigExpected)
		fill, hasFill := cnperftest.Num(r, responsiveness.FigFill)
		if between != hasExp || between != hasFill || (between && (exp < 0 || exp > full*1.001 || fill < 0 || fill > 100.1)) {
			t.Errorf("%v: the FIFO's queue %v ms (%v), %v %% full (%v); want one between 0 and its 20 ms on paths between nodes only",
				r["connection"], exp, hasExp, fill, hasFill)
		}
		rise, _ := cnperftest.Num(r, responsiveness.FigRiseP50)
		t.Logf("%v: idle p50 %v, loaded p50 %v, rise %.2f ms; queue at %v; %v", r["connection"], r["idle"], r["loaded"], rise, r[responsiveness.LabelQueueAt], r[responsiveness.LabelVerdict])
		if between {
			figure.Check(t, math.Abs(rise-exp) <= exp*responsiveness.ExpectTolerancePct/100,
				"%v: the loaded p50 rose %.2f ms; want the %.1f ms the FIFO's queue held (%.0f %% full) within %.0f %%",
				r["connection"], rise, exp, fill, responsiveness.ExpectTolerancePct)
			// The reference: the FIFO's limit at its rate, which
			// RRUL's 4 streams each way should keep it near.
			figure.Check(t, math.Abs(rise-full) <= full*responsiveness.ExpectTolerancePct/100,
				"%v: the loaded p50 rose %.2f ms; want the FIFO's limit/rate %.1f ms within %.0f %% (its queue held %.1f ms)",
				r["connection"], rise, full, responsiveness.ExpectTolerancePct, exp)
		}
	}
}
