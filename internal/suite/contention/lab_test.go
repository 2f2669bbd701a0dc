package contention_test

import (
	"math"
	"slices"
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/suite/contention"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestContentionLab: through a 1 Gbit/s FIFO between two lab nodes, two
// unpaced UDP floods from two pods and two TCP flows beside them: every
// flow receives something, no more than the bottleneck carries, and every
// case says whether its senders backed off (one of the suite's verdicts)
// and its Jain index (between 1/2 and 1 for two flows). What the machine
// achieves is logged as figures (figure.Check; make bench-lab asserts
// them): the floods fill the FIFO without backing off and the TCP flows
// fill most of it and back off (75.2 % beside a loaded CI run); one FIFO
// drops datagrams alike, so both floods lose about the same fraction
// (84.5 and 73.4 % beside a loaded run, 88.4 and 88.6 % quiet). Beside a
// CPU hog a flood's sender can be starved into a rate the FIFO carries,
// which then reads "backed off in some repetitions".
func TestContentionLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "contention", "--time", "3s", "--repeat", "3", "--pods-per-node", "2", "--set", "placements=cross-node")
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 2 flows and a case row for udp and for tcp", len(rows))
	}
	const bottleneck = 1e9
	var udpLoss []float64
	for _, r := range rows {
		share, okShare := cnperftest.Num(r, contention.FigShareOfBottleneck)
		rx, okRx := cnperftest.Num(r, "throughput_bps.receiver")
		fair, okFair := cnperftest.Num(r, contention.FigFairness)
		if r["flow"] == contention.FlowAll {
			rx, okRx = cnperftest.Num(r, contention.FigTotal)
			share, okShare = cnperftest.Num(r, contention.FigTotalOfBottleneck)
		}
		t.Logf("%v flow %v: receiver %.0f Mbit/s, %.1f %% of the bottleneck, fairness %.3f, backed off %v, errors %v",
			r["proto"], r["flow"], rx/1e6, share, fair, r[contention.LabelBackedOff], r["errors"])
		// Physics: nothing receives more than the bottleneck carries (5 %
		// for the measuring windows' edges).
		if !okRx || !okShare || rx > 1.05*bottleneck || share > 105 {
			t.Errorf("%v flow %v: receiver %.0f Mbit/s (%v), %.1f %% of the bottleneck (%v); want both, at most the 1 Gbit/s bottleneck",
				r["proto"], r["flow"], rx/1e6, okRx, share, okShare)
		}
		if r["flow"] != contention.FlowAll {
			if rx <= 0 {
				t.Errorf("%v flow %v received nothing", r["proto"], r["flow"])
			}
			if r["proto"] == "udp" {
				loss, ok := cnperftest.Num(r, "loss_pct")
				if !ok || loss < 0 || loss > 100 {
					t.Errorf("udp flow %v: loss %v %% (%v), want 0-100", r["flow"], loss, ok)
				}
				udpLoss = append(udpLoss, loss)
			}
			continue
		}
		backed, _ := r[contention.LabelBackedOff].(string)
		if !slices.Contains([]string{"yes", "no", "in some repetitions"}, backed) {
			t.Errorf("%v case: backed off %q, want yes, no or in some repetitions", r["proto"], backed)
		}
		// Jain's index of two flows lies in [1/2, 1] whatever they get.
		if !okFair || fair < 0.5 || fair > 1 {
			t.Errorf("%v case: fairness %.3f (%v), want 0.5-1", r["proto"], fair, okFair)
		}
		want := map[string]string{"udp": "no", "tcp": "yes"}[r["proto"].(string)]
		fill := map[string]float64{"udp": 80, "tcp": 60}[r["proto"].(string)]
		figure.Check(t, backed == want, "%v case: backed off %q, want %s", r["proto"], backed, want)
		figure.Check(t, share >= fill, "%v case: %.1f %% of the bottleneck, want at least %.0f", r["proto"], share, fill)
	}
	if len(udpLoss) != 2 {
		t.Errorf("UDP flows with a loss figure: %d, want 2", len(udpLoss))
	} else {
		figure.Check(t, math.Abs(udpLoss[0]-udpLoss[1]) <= 15,
			"UDP floods lost %.1f and %.1f %% of what they sent; want two within 15 points (one FIFO drops datagrams alike)", udpLoss[0], udpLoss[1])
	}
}
