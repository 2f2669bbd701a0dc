package k8stest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/qos"
)

// runVXLANInherit runs qos-priority's vxlan-inherit variant (tos inherit
// on the nodes' VXLAN devices, the remedy for a mark lost at
// encapsulation) on a VXLAN cluster: refused without the node opt-in,
// naming it; with it the EF flow's outer header carries EF on the
// sending node's wire (the plain vxlan variant: outer 0, with the remedy
// named in its verdict), and every node's VXLAN devices have their own
// TOS back afterwards.
func runVXLANInherit(t *testing.T, cl *Cluster, cnp cnpFunc, cniDir string, want CNIFacts) {
	if want.Backend != "vxlan" {
		t.Skipf("%s: no VXLAN between the nodes", want)
	}
	before := map[string]map[string]uint8{}
	for _, n := range cl.Nodes {
		tos, err := qos.VXLANTOS(n.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		before[n.Name] = tos
	}
	_, errOut, err := cnp(3*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants=vxlan-inherit", "--set", "placement=cross-node", "--cni-conf-dir", cniDir)
	if err == nil || !strings.Contains(errOut, "allow-node-qdisc=true") || !strings.Contains(errOut, "each VXLAN device of the node") {
		t.Errorf("vxlan-inherit without the opt-in: err %v\n%s", err, errOut)
	}
	t.Logf("vxlan-inherit without allow-node-qdisc refused: %s", strings.TrimSpace(errOut))
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants=vxlan,vxlan-inherit", "--set", "placement=cross-node", "--set", "markings=none,EF",
		"--set", "allow-node-qdisc=true", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run qos-priority --k8s vxlan-inherit: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows []row `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	outer := map[string]float64{}
	for _, r := range res.Rows {
		if r.Labels["marking"] != "EF" {
			continue
		}
		v := r.Labels["variant"]
		o, ok := r.Median["wire_dscp.outer"]
		t.Logf("%s EF: wire outer %v (%v) inner %v; dscp received %v; verdict: %s", v, o, ok, r.Median["wire_dscp.inner"], r.Median["dscp_received"], r.Labels["verdict"])
		if !ok {
			t.Errorf("%s EF: no wire_dscp.outer", v)
			continue
		}
		outer[v] = o
		if v == "vxlan" && !strings.Contains(r.Labels["verdict"], "variants=vxlan-inherit") {
			t.Errorf("vxlan EF verdict %q does not name the remedy", r.Labels["verdict"])
		}
	}
	if o, ok := outer["vxlan"]; !ok || o != 0 {
		t.Errorf("vxlan EF outer DSCP %v (%v), want 0 (mark lost at encapsulation)", o, ok)
	}
	if o, ok := outer["vxlan-inherit"]; !ok || o != 46 {
		t.Errorf("vxlan-inherit EF outer DSCP %v (%v), want 46 (EF copied to the outer header)", o, ok)
	}
	for _, n := range cl.Nodes {
		after, err := qos.VXLANTOS(n.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		for dev, tos := range before[n.Name] {
			if after[dev] != tos {
				t.Errorf("node %s: %s tos %d after the run, was %d", n.Name, dev, after[dev], tos)
			}
		}
	}
	t.Logf("vxlan-inherit on the cluster in %v", time.Since(t0).Round(time.Second))
}
