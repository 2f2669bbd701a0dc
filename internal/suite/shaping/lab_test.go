package shaping_test

import (
	"math"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestShapingLab: a pod's 10M egress limit, set as the CNI bandwidth
// plugin does, holds TCP and UDP offered at twice the limit to at most the
// goodput a 10 Mbit/s link allows (within 5 % of it on a quiet machine: a
// figure), measured at the receiver, with the peer on the shaped pod's
// node and on the other node; each placement's rows carry it and a
// verdict that agrees with them.
func TestShapingLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "shaping", "--time", "3s", "--pods-per-node", "2", "--set", "placement=same-node,cross-node",
		"--set", "egress-bandwidth=10M", "--set", "protos=tcp,udp", "--set", "loads=above", "--set", "burst=32Ki")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want tcp and udp in both placements", len(rows))
	}
	verdicts := map[any]any{}
	for _, r := range rows {
		if v, ok := verdicts[r["placement"]]; ok && v != r["verdict"] {
			t.Errorf("%v: two verdicts %q and %q", r["placement"], v, r["verdict"])
		}
		verdicts[r["placement"]] = r["verdict"]
	}
	// Each placement's verdict says what its rows measured: held exactly
	// when every flow is within 5 % of its goodput.
	held := map[any]bool{"same-node": true, "cross-node": true}
	for _, r := range rows {
		steady, _ := cnperftest.Num(r, "steady_state_bps")
		good, _ := cnperftest.Num(r, "goodput_bps")
		held[r["placement"]] = held[r["placement"]] && math.Abs(steady-good)/good <= 0.05
	}
	for _, p := range []string{"same-node", "cross-node"} {
		v, _ := verdicts[p].(string)
		t.Logf("%s: %s", p, v)
		if strings.HasPrefix(v, "limit held") != held[p] {
			t.Errorf("%s: verdict %q, but the rows say held %v", p, v, held[p])
		}
	}
	for _, r := range rows {
		steady, ok1 := cnperftest.Num(r, "steady_state_bps")
		good, ok2 := cnperftest.Num(r, "goodput_bps")
		limit, _ := cnperftest.Num(r, "limit_bps")
		if !ok1 || !ok2 || limit != 10e6 {
			t.Fatalf("row lacks figures: %v", r)
		}
		first, _ := cnperftest.Num(r, "first_interval_bps")
		t.Logf("%v %v: steady %.3f Mbit/s, goodput %.3f, first 100 ms %.3f, conform %v s, retransmits %v", r["placement"], r["proto"], steady/1e6, good/1e6, first/1e6, r["time_to_conform_s"], r["retransmits"])
		if _, ok := cnperftest.Num(r, "retransmits"); ok != (r["proto"] == "tcp") {
			t.Errorf("%v: retransmits present %v, want on the TCP row only", r["proto"], ok)
		}
		// Physics: the limit holds whatever CPU the sender gets; reaching
		// it takes a sender scheduled in time (a figure).
		if steady <= 0 || steady > 1.05*good {
			t.Errorf("%v: steady state %.3f Mbit/s, want some and at most 5 %% above the %.3f Mbit/s the limit allows", r["proto"], steady/1e6, good/1e6)
		}
		dev := math.Abs(steady-good) / good
		figure.Check(t, dev <= 0.05, "%v %v: steady state %.3f Mbit/s is %.1f %% off the %.3f Mbit/s the limit allows, want within 5 %%", r["placement"], r["proto"], steady/1e6, 100*dev, good/1e6)
	}
}
