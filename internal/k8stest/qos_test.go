package k8stest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/qos"
)

// runQoSPriority runs qos-priority on the cluster: as-is and pod-htb on
// both placements and, with the opt-in, node-htb across nodes (EF beside
// an unmarked flow, 2 s each); records the rows; checks that every row
// has its verdict, that pod-htb's EF flow's p99 one-way delay is at least
// 10x below the unmarked flow's under the same flood, and that no htb is
// left on any pod's or node's interface afterwards. With refusal set it
// first checks that node-htb without the opt-in is refused, saying what
// it would change, before anything is made.
func runQoSPriority(t *testing.T, cl *Cluster, cnp cnpFunc, cniDir string, want CNIFacts, rec *clusterRecord, refusal bool) {
	if refusal {
		t0 := time.Now()
		out, errOut, err := cnp(3*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
			"--set", "variants=node-htb", "--cni-conf-dir", cniDir)
		if err == nil || !strings.Contains(errOut, "allow-node-qdisc=true") || !strings.Contains(errOut, "interface toward the other node") {
			t.Errorf("node-htb without the opt-in: err %v\n%s\n%s", err, out, errOut)
		}
		t.Logf("node-htb without allow-node-qdisc refused in %v: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(errOut))
	}
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants=as-is,pod-htb,node-htb", "--set", "markings=none,EF", "--set", "allow-node-qdisc=true",
		"--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run qos-priority --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		RunIDs []string   `json:"run_ids"`
		Rows   []row      `json:"rows"`
		Holds  []k8s.Hold `json:"qos_holds"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	rec.add(t, want, out)
	t.Logf("qos-priority --k8s in %v: %d phases, holds %+v", time.Since(t0).Round(time.Second), len(res.RunIDs), res.Holds)
	checkCNILabels(t, res.Rows, want)
	type key struct{ conn, variant, marking string }
	got := map[key]row{}
	for _, r := range res.Rows {
		k := key{r.Connection, r.Labels["variant"], r.Labels["marking"]}
		got[k] = r
		t.Logf("%-18s %-8s %-4s p99 %7.3f ms  loss %5.2f %%  dscp received %v  background %5.0f Mbit/s  verdict: %s",
			k.conn, k.variant, k.marking, r.Median["latency_ms.p99"], r.Median["loss_pct"],
			r.Median["dscp_received"], r.Median["background_throughput_bps"]/1e6, r.Labels["verdict"])
		if r.Labels["verdict"] == "" {
			t.Errorf("%v: no verdict", k)
		}
	}
	for _, c := range []key{
		{"pod-pod same node", "as-is", "EF"}, {"pod-pod same node", "pod-htb", "EF"},
		{"pod-pod cross node", "as-is", "EF"}, {"pod-pod cross node", "pod-htb", "EF"}, {"pod-pod cross node", "node-htb", "EF"},
	} {
		r, ok := got[c]
		if !ok {
			t.Errorf("no row %v", c)
			continue
		}
		if c.variant != "pod-htb" {
			continue
		}
		// The Must show: under the same flood, EF's p99 at least 10x
		// below the unmarked flow's.
		ef, ref := r.Median["latency_ms.p99"], r.Median["reference_latency_ms.p99"]
		if !(ef > 0) || ref/ef < 10 {
			t.Errorf("%s pod-htb: EF p99 %.3f ms, unmarked beside it %.3f ms: %.1fx, want at least 10x", c.conn, ef, ref, ref/ef)
		} else {
			t.Logf("%s pod-htb: EF p99 %.3f ms against %.3f ms unmarked: %.0fx lower", c.conn, ef, ref, ref/ef)
		}
	}
	if len(res.Holds) != 3 {
		t.Errorf("holds %+v, want pod-htb's two and node-htb's one", res.Holds)
	}
	checkNoHTB(t, cl)
}

// checkNoHTB: no pod's eth0 and no node's eth0 has an htb at its root
// once the suite is done (the agents removed what they held). The agents
// hear of the end within a second; give them a few.
func checkNoHTB(t *testing.T, cl *Cluster) {
	t.Helper()
	var targets []qos.Target
	for _, n := range cl.Nodes {
		targets = append(targets, qos.Target{NetNS: "/var/run/netns/" + n.NetNS, Link: "eth0"})
		// containerd mounts the pods' namespaces under its CRI plugin's
		// state directory (netns_mounts_under_state_dir).
		pods, _ := filepath.Glob(filepath.Join(filepath.Dir(n.Socket), "state", "*", "netns", "*"))
		if len(pods) == 0 {
			t.Errorf("node %s: no pod namespace found under %s to look at", n.Name, filepath.Dir(n.Socket))
		}
		for _, p := range pods {
			targets = append(targets, qos.Target{NetNS: p, Link: "eth0"})
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, tg := range targets {
			st, err := qos.Show(tg)
			if err != nil {
				continue // a pod's namespace without eth0, or gone meanwhile
			}
			if r, ok := st.Root(); ok && r.Kind == "htb" {
				left = append(left, fmt.Sprintf("%s %s", tg.NetNS, tg.Link))
			}
		}
		if len(left) == 0 {
			t.Logf("no htb left on the %d interfaces looked at (pods' and nodes' eth0)", len(targets))
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("htb left after qos-priority on %v", left)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
