package k8stest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// runWireDSCP runs qos-priority as-is across nodes (EF beside an unmarked
// flow, 1 s) and checks the EF row's wire_dscp: the host-network agents
// watched each node's underlay for the EF flow. On a VXLAN backend the
// mark stays on the inner header and the outer carries TOS 0 (no CNI here
// sets tos inherit on its VTEP: ../shared/K8S-FACTS.md); unencapsulated
// the mark itself is on the wire.
func runWireDSCP(t *testing.T, cnp cnpFunc, cniDir string, want CNIFacts) {
	t0 := time.Now()
	out, errOut, err := cnp(5*time.Minute, "run", "qos-priority", "--k8s", "--time", "1s", "--repeat", "1",
		"--set", "variants=as-is", "--set", "markings=none,EF", "--set", "placements=cross-node", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run qos-priority --k8s: %v\n%s\n%s", err, out, errOut)
	}
	var res struct {
		Rows []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	seen := false
	for _, raw := range res.Rows {
		var r row
		var w struct {
			Errors []string `json:"errors"`
			Wire   struct {
				Encap string `json:"encap"`
			} `json:"wire_dscp"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &w); err != nil {
			t.Fatal(err)
		}
		if r.Labels["marking"] != "EF" {
			continue
		}
		seen = true
		outer, okO := r.Median["wire_dscp.outer"]
		inner, okI := r.Median["wire_dscp.inner"]
		packets := r.Median["wire_dscp.packets"]
		fig := func(k string) string {
			if v, ok := r.Median[k]; ok {
				return fmt.Sprint(v)
			}
			return "-"
		}
		t.Logf("%s %s EF %s → %s in %v: wire_dscp encap %q outer %s inner %s (%s packets), arrival outer %s inner %s (%s packets); dscp received %s; errors %v; verdict: %s",
			want, r.Labels["variant"], r.Src, r.Dst, time.Since(t0).Round(time.Second), w.Wire.Encap, fig("wire_dscp.outer"), fig("wire_dscp.inner"),
			fig("wire_dscp.packets"), fig("wire_dscp.arrival.outer"), fig("wire_dscp.arrival.inner"), fig("wire_dscp.arrival.packets"),
			fig("dscp_received"), w.Errors, r.Labels["verdict"])
		if !okO || packets == 0 {
			t.Errorf("%s: no wire_dscp on the EF row (errors %v)", want, w.Errors)
			continue
		}
		if want.Backend == "vxlan" {
			if w.Wire.Encap != "vxlan" || outer != 0 || !okI || inner != 46 {
				t.Errorf("%s: EF row wire_dscp encap %q outer %v inner %v, want vxlan, outer 0, inner 46", want, w.Wire.Encap, outer, inner)
			}
		} else if w.Wire.Encap != "none" || outer != 46 {
			t.Errorf("%s: EF row wire_dscp encap %q outer %v, want none, outer 46", want, w.Wire.Encap, outer)
		}
	}
	if !seen {
		t.Errorf("%s: no EF row in %s", want, out)
	}
}
