package k8stest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/k8s"
)

// runShapingCalicoAsMade runs shaping on Calico with Calico's own
// annotation (qos.projectcalico.org/egressBandwidth: 100M) and the bucket
// as Felix makes it (drain=false): one TCP flood for 8 s. The row says
// Felix made the limit, carries the burst read back from its tbf (Calico's
// default 4 Gibit, 512 MiB: libcalico-go's defaultBurst) and shows it in
// the overshoot, the time to conform and the bytes that came above the
// limit before the flow conformed.
func runShapingCalicoAsMade(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "shaping", "--k8s", "--time", "8s", "--repeat", "1",
		"--set", "egress-bandwidth=100M", "--set", "annotations=calico", "--set", "drain=false",
		"--set", "protos=tcp", "--set", "loads=flood", "--set", "placement=cross-node", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run shaping --k8s (calico annotations, as made): %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		RunID   string `json:"run_id"`
		Rows    []row  `json:"rows"`
		Shaping struct {
			Pod         string          `json:"pod"`
			Annotations json.RawMessage `json:"annotations"`
			Links       []k8s.LinkTC    `json:"links"`
		} `json:"shaping_qdiscs"`
		Drain *row `json:"shaping_drain"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	t.Logf("shaping --k8s with Calico's annotation %s, bucket as made, in %v; qdiscs Felix installed for %s:\n  %s", res.Shaping.Annotations,
		time.Since(t0).Round(time.Second), res.Shaping.Pod, strings.Join(k8s.DescribeQdiscs(res.Shaping.Links), "\n  "))
	if !strings.Contains(string(res.Shaping.Annotations), "qos.projectcalico.org/egressBandwidth") {
		t.Errorf("shaped pod's annotations %s, want Calico's qos.projectcalico.org/egressBandwidth", res.Shaping.Annotations)
	}
	if res.Drain != nil {
		t.Errorf("drain=false, yet a drain flow ran: %+v", res.Drain)
	}
	felixTBF := false
	for _, l := range res.Shaping.Links {
		for _, q := range l.Qdiscs {
			if q.Kind == "tbf" && q.RateBps == 100e6 && strings.HasPrefix(l.Name, "bwcali") {
				felixTBF = true
			}
		}
	}
	if !felixTBF {
		t.Errorf("want Felix's 100Mbit tbf on its bwcali ifb; got %+v", res.Shaping.Links)
	}
	if len(res.Rows) == 0 {
		t.Fatal("no rows")
	}
	checkCNILabels(t, res.Rows, want)
	for _, r := range res.Rows {
		burst, excess := r.Median["burst_bytes"], r.Median["excess_bytes"]
		conform := "never (in 8 s)"
		if v, ok := r.Median["time_to_conform_s"]; ok {
			conform = time.Duration(v * float64(time.Second)).String()
		}
		t.Logf("%s %s load %s, burst %s: first 100 ms %.0f Mbit/s (overshoot %+.0f %%), time to conform %s, %.0f MB above the limit before conforming (burst read back %.0f MB), steady state %.1f Mbit/s",
			r.Labels["direction"], r.Labels["proto"], r.Labels["load"], r.Labels["burst"], r.Median["first_interval_bps"]/1e6, r.Median["overshoot_pct"],
			conform, excess/1e6, burst/1e6, r.Median["steady_state_bps"]/1e6)
		if !strings.Contains(r.Labels["burst"], "(Calico Felix)") {
			t.Errorf("burst label %q does not say Calico's Felix made the limit", r.Labels["burst"])
		}
		// Calico's default: 4 Gibit = 512 MiB (plus the tbf's rounding).
		if burst < 500e6 || burst > 600e6 {
			t.Errorf("burst read back %.0f bytes, want Calico's default 512 MiB", burst)
		}
		// The bucket shows: the first interval far above the limit, and
		// more than 100 MB above the limit before the flow conformed.
		if r.Median["overshoot_pct"] < 100 || excess < 100e6 {
			t.Errorf("overshoot %.0f %%, %.0f MB above the limit: the default burst did not show", r.Median["overshoot_pct"], excess/1e6)
		}
	}
}
