package suite

import (
	"math"
	"slices"
	"testing"
)

// FuzzParseSLOs feeds the SLO file parser: whatever it accepts names a
// known metric, a known operator and a finite threshold. `go test` runs
// the seeds; scripts/fuzz.sh fuzzes.
func FuzzParseSLOs(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < 2"},{"connection":"pod-pod cross node","expr":"rtt_ms.p99 < 1"},{"expr":"throughput_bps.receiver > 500M"}]}`,
		`{"apiVersion":"cnperf/v1","objectives":[{"connection":"node-node","expr":"rtt_ms.p99 <= 1.5"},{"expr":"jitter_ms.p50 >= 0.01"},{"expr":"loss_pct == 0"}]}`,
		`{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct ~ 2"}]}`,
		`{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < 1e400"}]}`,
		`{"apiVersion":"cnperf/v1","objectives":[{"expr":"throughput_bps.receiver > 1.5G"}]}`,
		`{"apiVersion":"v0","objectives":[]}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	known := KnownMetrics(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := ParseSLOs(data, nil)
		if err != nil {
			return
		}
		if len(objs) == 0 {
			t.Fatal("accepted a file without objectives")
		}
		for _, o := range objs {
			if !known[o.Metric] || !slices.Contains(sloOps, o.Op) {
				t.Fatalf("accepted objective %+v: unknown metric or operator", o)
			}
			if math.IsNaN(o.Threshold) || math.IsInf(o.Threshold, 0) {
				t.Fatalf("accepted objective %+v: threshold not finite", o)
			}
		}
	})
}
