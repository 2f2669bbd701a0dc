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
// encapsulation) on a VXLAN cluster. Where the nodes' VXLAN devices are
// classic ones (Flannel, Calico): refused without the node opt-in, naming
// it; with it the EF flow's outer header carries EF on the sending node's
// wire (the plain vxlan variant: outer 0, with the remedy named in its
// verdict), and every node's VXLAN devices have their own TOS back
// afterwards. Where a node's device is in metadata mode (Cilium's
// cilium_vxlan, read off the node here), tos inherit does nothing: the
// variant is refused, with or without the opt-in, naming the device and
// why, and the plain vxlan variant's verdict names no tos inherit remedy
// but that none of Cilium's settings carries the mark.
func runVXLANInherit(t *testing.T, cl *Cluster, cnp cnpFunc, cniDir string, want CNIFacts) {
	if want.Backend != "vxlan" {
		t.Skipf("%s: no VXLAN between the nodes", want)
	}
	before, metadata := nodeVXLAN(t, cl)
	t.Logf("%s: VXLAN devices %v, in metadata mode %v", want, before, metadata)
	refused := func(errOut string) bool {
		if len(metadata) == 0 {
			return strings.Contains(errOut, "allow-node-qdisc=true") && strings.Contains(errOut, "each VXLAN device of the node")
		}
		return strings.Contains(errOut, metadata[0]+" is a metadata-mode VXLAN device") && strings.Contains(errOut, "tunnel key")
	}
	_, errOut, err := cnp(3*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants=vxlan-inherit", "--set", "placement=cross-node", "--cni-conf-dir", cniDir)
	if err == nil || !refused(errOut) {
		t.Errorf("vxlan-inherit without the opt-in: err %v\n%s", err, errOut)
	}
	t.Logf("vxlan-inherit without allow-node-qdisc refused: %s", strings.TrimSpace(errOut))
	variants := "vxlan,vxlan-inherit"
	if len(metadata) > 0 {
		_, errOut, err := cnp(3*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
			"--set", "variants=vxlan,vxlan-inherit", "--set", "placement=cross-node", "--set", "allow-node-qdisc=true", "--cni-conf-dir", cniDir)
		if err == nil || !refused(errOut) {
			t.Errorf("vxlan-inherit with the opt-in on a metadata-mode tunnel: err %v, want a refusal naming %s\n%s", err, metadata[0], errOut)
		}
		t.Logf("vxlan-inherit with allow-node-qdisc on %v refused: %s", metadata, strings.TrimSpace(errOut))
		variants = "vxlan"
	}
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants="+variants, "--set", "placement=cross-node", "--set", "markings=none,EF",
		"--set", "allow-node-qdisc=true", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run qos-priority --k8s %s: %v\n%s\n%s", variants, err, out, errOut)
	}
	var res struct {
		Rows []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	outer, inner := map[string]float64{}, map[string]float64{}
	for _, raw := range res.Rows {
		var r row
		var e struct {
			Errors []string `json:"errors"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(raw, &e)
		if r.Labels["marking"] != "EF" {
			continue
		}
		v := r.Labels["variant"]
		o, ok := r.Median["wire_dscp.outer"]
		t.Logf("%s EF: wire outer %v (%v) inner %v; dscp received %v; errors %v; verdict: %s", v, o, ok, r.Median["wire_dscp.inner"], r.Median["dscp_received"], e.Errors, r.Labels["verdict"])
		if !ok {
			t.Errorf("%s EF: no wire_dscp.outer\n%s", v, raw)
			continue
		}
		outer[v], inner[v] = o, r.Median["wire_dscp.inner"]
		verdict := r.Labels["verdict"]
		switch {
		case v != "vxlan":
		case len(metadata) == 0 && !strings.Contains(verdict, "variants=vxlan-inherit"):
			t.Errorf("vxlan EF verdict %q does not name the remedy", verdict)
		case len(metadata) > 0 && (strings.Contains(verdict, "variants=vxlan-inherit") || !strings.Contains(verdict, "is a metadata-mode VXLAN device") ||
			!strings.Contains(verdict, "no setting of Cilium carries it")):
			t.Errorf("vxlan EF verdict %q: on a metadata-mode tunnel it must name no tos inherit remedy, but the device and that no setting of Cilium carries it", verdict)
		}
	}
	if o, ok := outer["vxlan"]; !ok || o != 0 || inner["vxlan"] != 46 {
		t.Errorf("vxlan EF outer DSCP %v (%v) inner %v, want 0 and 46 (mark lost at encapsulation)", o, ok, inner["vxlan"])
	}
	if o, ok := outer["vxlan-inherit"]; len(metadata) == 0 && (!ok || o != 46) {
		t.Errorf("vxlan-inherit EF outer DSCP %v (%v), want 46 (EF copied to the outer header)", o, ok)
	}
	checkVXLANRestored(t, cl, before)
	t.Logf("qos-priority %s on the cluster in %v", variants, time.Since(t0).Round(time.Second))
}

// nodeVXLAN reads each node's VXLAN devices with their outer TOS setting,
// by node name, and the names of those in metadata mode.
func nodeVXLAN(t *testing.T, cl *Cluster) (tos map[string]map[string]uint8, metadata []string) {
	t.Helper()
	tos = map[string]map[string]uint8{}
	for _, n := range cl.Nodes {
		devs, err := qos.VXLANTOS(n.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		tos[n.Name] = devs
		md, err := qos.VXLANMetadata(n.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		metadata = append(metadata, md...)
	}
	return tos, metadata
}

// checkVXLANRestored checks that every VXLAN device read before a run has
// its outer TOS setting back after it.
func checkVXLANRestored(t *testing.T, cl *Cluster, before map[string]map[string]uint8) {
	t.Helper()
	after, _ := nodeVXLAN(t, cl)
	for node, devs := range before {
		for dev, tos := range devs {
			if after[node][dev] != tos {
				t.Errorf("node %s: %s tos %d after the run, was %d", node, dev, after[node][dev], tos)
			}
		}
	}
}
