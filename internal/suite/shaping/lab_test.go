package shaping_test

import (
	"math"
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestShapingLab: a pod's 10M egress limit, set as the CNI bandwidth
// plugin does, holds TCP and UDP offered at twice the limit to within 5 %
// of the goodput a 10 Mbit/s link allows, measured at the receiver.
func TestShapingLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "shaping", "--time", "3s",
		"--set", "egress-bandwidth=10M", "--set", "protos=tcp,udp", "--set", "loads=above", "--set", "burst=32Ki")
	if len(rows) != 2 {
		t.Fatalf("%d rows, want tcp and udp", len(rows))
	}
	for _, r := range rows {
		steady, ok1 := cnperftest.Num(r, "steady_state_bps")
		good, ok2 := cnperftest.Num(r, "goodput_bps")
		limit, _ := cnperftest.Num(r, "limit_bps")
		if !ok1 || !ok2 || limit != 10e6 {
			t.Fatalf("row lacks figures: %v", r)
		}
		first, _ := cnperftest.Num(r, "first_interval_bps")
		t.Logf("%v: steady %.3f Mbit/s, goodput %.3f, first 100 ms %.3f, conform %v s, retransmits %v", r["proto"], steady/1e6, good/1e6, first/1e6, r["time_to_conform_s"], r["retransmits"])
		if _, ok := cnperftest.Num(r, "retransmits"); ok != (r["proto"] == "tcp") {
			t.Errorf("%v: retransmits present %v, want on the TCP row only", r["proto"], ok)
		}
		if dev := math.Abs(steady-good) / good; dev > 0.05 {
			t.Errorf("%v: steady state %.3f Mbit/s is %.1f %% off the %.3f Mbit/s the limit allows", r["proto"], steady/1e6, 100*dev, good/1e6)
		}
	}
}
