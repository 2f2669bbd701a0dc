package contention_test

import (
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/suite/contention"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestContentionLab: through a 1 Gbit/s FIFO between two lab nodes, two
// unpaced UDP floods from two pods each get about half (the thesis's
// Table 8: about 473 Mbit/s each), and neither sender backs off; two TCP
// flows beside them share it too and do back off.
func TestContentionLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "contention", "--time", "4s", "--pods-per-node", "2", "--set", "placements=cross-node")
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 2 flows and a case row for udp and for tcp", len(rows))
	}
	for _, r := range rows {
		share, _ := cnperftest.Num(r, contention.FigShareOfBottleneck)
		rx, _ := cnperftest.Num(r, "throughput_bps.receiver")
		if r["flow"] == contention.FlowAll {
			rx, _ = cnperftest.Num(r, contention.FigTotal)
			share, _ = cnperftest.Num(r, contention.FigTotalOfBottleneck)
		}
		fair, _ := cnperftest.Num(r, contention.FigFairness)
		t.Logf("%v flow %v: receiver %.0f Mbit/s, %.1f %% of the bottleneck, fairness %.3f, backed off %v, errors %v",
			r["proto"], r["flow"], rx/1e6, share, fair, r[contention.LabelBackedOff], r["errors"])
		switch {
		case r["flow"] == contention.FlowAll:
			want := map[string]string{"udp": "no", "tcp": "yes"}[r["proto"].(string)]
			if r[contention.LabelBackedOff] != want || fair < 0.9 {
				t.Errorf("%v case: backed off %v (want %s), fairness %.3f (want at least 0.9)", r["proto"], r[contention.LabelBackedOff], want, fair)
			}
		case r["proto"] == "udp" && (share < 40 || share > 60):
			t.Errorf("udp flow %v got %.1f %% of the bottleneck, want 40-60 %%", r["flow"], share)
		}
	}
}
