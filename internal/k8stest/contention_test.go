package k8stest

import (
	"encoding/json"
	"testing"
	"time"
)

// runContention runs `cnperf run contention --k8s` as a user of a default
// deploy would (no allow-node-qdisc, no setting): rows on both
// placements, same node from the node's second agent pod into its first,
// cross node with the path itself as the bottleneck (no FIFO of its own);
// every flow receives something, each case has a Jain index between 1/N
// and 1 and a back-off verdict. The run's stored environment names the
// CNI, its mode and, where the cluster shows it, its version.
func runContention(t *testing.T, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord) {
	t0 := time.Now()
	out, errOut, err := cnp(6*time.Minute, "run", "contention", "--k8s", "--time", "2s", "--repeat", "1", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run contention --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows        []row `json:"rows"`
		Environment struct {
			CNI        string `json:"cni"`
			CNIVersion string `json:"cni_version"`
			Backend    string `json:"backend"`
		} `json:"environment"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	checkCNILabels(t, res.Rows, want)
	cases := map[string]int{}
	for _, r := range res.Rows {
		pl, proto, flow := r.Labels["placement"], r.Labels["proto"], r.Labels["flow"]
		t.Logf("contention %s %s flow %s (bottleneck %s): %v", pl, proto, flow, r.Labels["bottleneck"], r.Median)
		if pl == "cross-node" && r.Labels["bottleneck"] != "path" {
			t.Errorf("cross-node bottleneck %q, want path (no FIFO of its own unless asked)", r.Labels["bottleneck"])
		}
		if flow != "all" {
			if rx := r.Median["throughput_bps.receiver"]; rx <= 0 {
				t.Errorf("%s %s flow %s received nothing: %v", pl, proto, flow, r.Median)
			}
			continue
		}
		cases[pl]++
		if f, ok := r.Median["fairness_index"]; !ok || f < 0.5 || f > 1 {
			t.Errorf("%s %s: fairness %v (%v), want 0.5-1 for two flows", pl, proto, f, ok)
		}
		if b := r.Labels["backed_off"]; b != "yes" && b != "no" && b != "in some repetitions" {
			t.Errorf("%s %s: backed off %q", pl, proto, b)
		}
	}
	if cases["same-node"] != 2 || cases["cross-node"] != 2 {
		t.Errorf("case rows per placement %v, want udp and tcp on same-node and cross-node", cases)
	}
	env := res.Environment
	t.Logf("stored environment: CNI %q version %q backend %q", env.CNI, env.CNIVersion, env.Backend)
	if env.CNI != want.Name || env.Backend != want.Backend {
		t.Errorf("stored environment names CNI %q backend %q, want %q %q", env.CNI, env.Backend, want.Name, want.Backend)
	}
	// Calico publishes its release (ClusterInformation); the harness runs
	// flanneld as a process, with no DaemonSet whose image tag would say
	// its release.
	if want.Name == "calico" && env.CNIVersion != want.Version {
		t.Errorf("stored environment: CNI version %q, want %q", env.CNIVersion, want.Version)
	}
	t.Logf("contention on both placements in %v", time.Since(t0).Round(time.Second))
}
