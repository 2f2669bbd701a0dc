package k8stest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/suite/netpol"
)

// runNetpol runs `cnperf run netpol --k8s` as a user would. On a CNI
// that enforces NetworkPolicy (by the product's own detection of the
// cluster's CNI) it gives a row for 0, 10, 100 and 1,000 policies, each
// selecting the pair and not, the deny row and the enforcement row
// (latencies or why none were measured), and leaves no NetworkPolicy
// and no policy label behind, also when the run failed; a removal the
// pair does not get through fails the run (Env.Apply's undo). Elsewhere
// (Flannel) the suite is refused with the reason, before anything is
// made. The figures are logged and recorded, not asserted.
func runNetpol(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	enforces, why := k8s.CNI{Name: want.Name}.EnforcesNetworkPolicy()
	defer checkNoPolicies(ctx, t, kc)
	out, errOut, err := cnp(20*time.Minute, "run", "netpol", "--k8s", "--time", "2s", "--repeat", "1", "--set", "enforce=5",
		"--cni-conf-dir", cniDir, "--json")
	if !enforces {
		if err == nil {
			t.Fatalf("cnperf run netpol --k8s on %s succeeded, want it refused:\n%s", want, out)
		}
		if !strings.Contains(errOut, why) {
			t.Errorf("refusal on %s: %q, want the reason %q", want, errOut, why)
		}
		t.Logf("netpol on %s refused: %s", want, strings.TrimSpace(errOut))
		return
	}
	if err != nil {
		t.Fatalf("cnperf run netpol --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows []row `json:"rows"`
	}
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	_ = json.Unmarshal([]byte(out), &raw)
	rec.add(t, want, out)
	checkCNILabels(t, res.Rows, want)
	seen := map[string]bool{}
	for i, r := range res.Rows {
		pol, sel := r.Labels[netpol.LabelPolicies], r.Labels[netpol.LabelSelect]
		seen[pol+"/"+sel] = true
		errs := raw.Rows[i]["errors"]
		switch pol {
		case netpol.PoliciesDeny:
			t.Logf("netpol deny mid-run: established %s, new %s (errors %v)", r.Labels[netpol.LabelEstablished], r.Labels[netpol.LabelNew], errs)
			if r.Labels[netpol.LabelEstablished] == "" || r.Labels[netpol.LabelNew] == "" {
				t.Errorf("deny row %v: want whether the established connection was kept and new ones refused", r.Labels)
			}
		case netpol.PoliciesEnforce:
			_, ok := r.Median[netpol.FigDenyP50]
			t.Logf("netpol enforcement latency over %v samples: deny p50 %.1f ms p99 %.1f ms, allow p50 %.1f ms p99 %.1f ms, removal p50 %.0f ms p99 %.0f ms (errors %v)",
				raw.Rows[i]["repetitions"], r.Median[netpol.FigDenyP50], r.Median[netpol.FigDenyP99], r.Median[netpol.FigAllowP50], r.Median[netpol.FigAllowP99],
				r.Median[netpol.FigRemovalP50], r.Median[netpol.FigRemovalP99], errs)
			if !ok && errs == nil {
				t.Errorf("enforcement row %v: neither latencies nor why none were measured", r.Median)
			}
		default:
			t.Logf("netpol %5s policies (%s): TCP %.0f Mbit/s (%.1f %%), rr %.0f/s (%.1f %%), crr %.0f/s (%.1f %%) of none (errors %v)", pol, sel,
				r.Median[netpol.FigThroughput]/1e6, r.Median[netpol.FigThroughputVsNone], r.Median[netpol.FigRR], r.Median[netpol.FigRRVsNone],
				r.Median[netpol.FigCRR], r.Median[netpol.FigCRRVsNone], errs)
			for _, f := range []string{netpol.FigThroughput, netpol.FigRR, netpol.FigCRR} {
				if r.Median[f] <= 0 {
					t.Errorf("%s policies (%s): %s = %v, want a measured figure (errors %v)", pol, sel, f, r.Median[f], errs)
				}
			}
		}
	}
	for _, k := range []string{"0/none", "10/pair", "10/other", "100/pair", "100/other", "1000/pair", "1000/other", "deny/pair", "enforce/pair"} {
		if !seen[k] {
			t.Errorf("no row %s (rows %v)", k, seen)
		}
	}
	t.Logf("netpol on %s in %v", want, time.Since(t0).Round(time.Second))
}

// checkNoPolicies checks that no NetworkPolicy cnperf made and no policy
// label on a pod is left.
func checkNoPolicies(ctx context.Context, t *testing.T, kc *k8s.Client) {
	t.Helper()
	if n, err := kc.CountPolicies(ctx); err != nil || n != 0 {
		t.Errorf("NetworkPolicies left: %d (%v)", n, err)
	}
	for _, l := range []string{k8s.PolicyTargetLabel, k8s.PolicySourceLabel} {
		pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: l})
		if err != nil {
			t.Errorf("list pods labelled %s: %v", l, err)
			continue
		}
		if len(pods.Items) > 0 {
			t.Errorf("%d pods keep the label %s", len(pods.Items), l)
		}
	}
}
