package k8stest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite/cniqos"
)

// runCNIQoSRemedy runs cni-qos's tunnel-mark feature with the node
// opt-in (--set allow-node-qdisc=true): a pod's own EF mark to a pod on
// the other node, watched on both nodes' wire. On a VXLAN mode whose
// devices are classic ones (Flannel, Calico) the outer header loses the
// mark (outer 0, inner 46) and the remedy row, tos inherit applied on
// both nodes, sees it carried (outer 46), every device's own TOS back
// afterwards. On a metadata-mode tunnel (Cilium's cilium_vxlan, read off
// the nodes here) no device setting is tried and the remedy row says
// that no setting of Cilium carries the mark. Without a tunnel the
// feature cannot be tried.
func runCNIQoSRemedy(t *testing.T, cl *Cluster, cnp cnpFunc, cniDir string, want CNIFacts) {
	before, metadata := nodeVXLAN(t, cl)
	t0 := time.Now()
	out, errOut, err := cnp(10*time.Minute, "run", "cni-qos", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "features=tunnel-mark", "--set", "allow-node-qdisc=true", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run cni-qos --k8s tunnel-mark: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	got := map[string]row{}
	for _, raw := range res.Rows {
		var r row
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		f := r.Labels[cniqos.LabelFeature]
		got[f] = r
		t.Logf("VERDICT %s | %s | %s | %s | %s | wire outer %v inner %v, arrived %v", want, f, r.Labels[cniqos.LabelSet],
			r.Labels[cniqos.LabelVerdict], r.Labels[cniqos.LabelWhy], fig(r, "wire_dscp.outer"), fig(r, "wire_dscp.inner"), fig(r, "dscp_received"))
	}
	mark, remedy := got["tunnel-mark"], got["tunnel-mark"+cniqos.RemedySuffix]
	switch {
	case want.Backend != "vxlan":
		if mark.Labels[cniqos.LabelVerdict] != cniqos.Untried || !strings.Contains(mark.Labels[cniqos.LabelWhy], "no tunnel") {
			t.Errorf("%s: tunnel-mark %v, want it not tried for want of a tunnel", want, mark.Labels)
		}
	case len(metadata) > 0:
		if o, ok := mark.Median["wire_dscp.outer"]; !ok || o != 0 || mark.Median["wire_dscp.inner"] != 46 {
			t.Errorf("%s: tunnel-mark outer %v (%v) inner %v, want 0 and 46 (lost at encapsulation)", want, o, ok, mark.Median["wire_dscp.inner"])
		}
		if remedy.Labels[cniqos.LabelVerdict] != cniqos.None || !strings.Contains(remedy.Labels[cniqos.LabelWhy], metadata[0]+" is a metadata-mode VXLAN device") ||
			!strings.Contains(remedy.Labels[cniqos.LabelWhy], "no setting of Cilium carries it") {
			t.Errorf("%s: remedy %v, want none: the metadata-mode device named and no setting of Cilium", want, remedy.Labels)
		}
	default:
		if o, ok := mark.Median["wire_dscp.outer"]; !ok || o != 0 || mark.Median["wire_dscp.inner"] != 46 ||
			!strings.Contains(mark.Labels[cniqos.LabelWhy], "tos inherit on") {
			t.Errorf("%s: tunnel-mark outer %v (%v) inner %v (%s), want 0 and 46 with tos inherit named", want, o, ok, mark.Median["wire_dscp.inner"], mark.Labels[cniqos.LabelWhy])
		}
		if o, ok := remedy.Median["wire_dscp.outer"]; remedy.Labels[cniqos.LabelVerdict] != cniqos.Works || !ok || o != 46 {
			t.Errorf("%s: remedy %v outer %v (%v), want works with outer 46", want, remedy.Labels, o, ok)
		}
	}
	// The run's end cancels the hold and waits for the node's agent to
	// acknowledge that it restored each device's setting (the task's
	// stopped_at), so the settings are back when the run returns.
	checkVXLANRestored(t, cl, before)
	t.Logf("cni-qos tunnel-mark on %s in %v", want, time.Since(t0).Round(time.Second))
}

// fig is a row's figure as text ("-" when absent).
func fig(r row, k string) string {
	if v, ok := r.Median[k]; ok {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return "-"
}
