package qospriority_test

import (
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
)

// TestWireDSCPLab: the host-network agents' wire watches see where an EF
// mark is on the sending node's underlay: on a vxlan lab with the default
// outer TOS the EF row has wire_dscp.outer 0 and wire_dscp.inner 46 and the
// verdict says the mark was lost at encapsulation; with tos inherit the
// outer header carries 46; on host-gw the flow is on the wire as it is
// (encap none, outer 46). The receiving node's watch sees the same.
func TestWireDSCPLab(t *testing.T) {
	type want struct {
		encap        string
		outer, inner float64 // inner -1: none
		verdict      string
	}
	for _, c := range []struct {
		name string
		args []string
		want map[string]want // by variant
	}{
		{"vxlan", []string{"--backend", "vxlan", "--set", "variants=vxlan,vxlan-inherit"}, map[string]want{
			"vxlan":         {"vxlan", 0, 46, "mark lost at encapsulation (outer 0, inner 46; the remedy, tos inherit: --set variants=vxlan-inherit)"},
			"vxlan-inherit": {"vxlan", 46, 46, "outer 46"},
		}},
		{"host-gw", []string{"--set", "variants=fifo"}, map[string]want{
			"fifo": {"none", 46, -1, "mark on the wire"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"qos-priority", "--time", "1s", "--set", "markings=none,EF"}, c.args...)
			rows := cnperftest.LabRun(t, args...)
			seen := map[string]bool{}
			for _, r := range rows {
				variant, marking := r["variant"].(string), r["marking"].(string)
				outer, okO := cnperftest.Num(r, "wire_dscp.outer")
				inner, okI := cnperftest.Num(r, "wire_dscp.inner")
				packets, _ := cnperftest.Num(r, "wire_dscp.packets")
				arrOuter, okA := cnperftest.Num(r, "wire_dscp.arrival.outer")
				wire, _ := r["wire_dscp"].(map[string]any)
				encap, _ := wire["encap"].(string)
				t.Logf("%s/%s: wire_dscp %v (errors %v), verdict: %v", variant, marking, r["wire_dscp"], r["errors"], r["verdict"])
				if marking != "EF" {
					continue
				}
				w, ok := c.want[variant]
				if !ok {
					t.Errorf("unexpected variant %q", variant)
					continue
				}
				seen[variant] = true
				if !okI {
					inner = -1
				}
				if !okO || outer != w.outer || inner != w.inner || encap != w.encap {
					t.Errorf("%s/EF: wire_dscp encap %q outer %v inner %v, want %q outer %v inner %v", variant, encap, outer, inner, w.encap, w.outer, w.inner)
				}
				// 100 datagrams/s for 1 s: the watch sees some and no more
				// than were sent; a few may go before the watch opens, and
				// more are missed beside a CPU hog (a figure).
				if packets <= 0 || packets > 110 {
					t.Errorf("%s/EF: the watch saw %v packets of the marked flow, want some and at most the ~100 sent", variant, packets)
				}
				figure.Check(t, packets >= 50, "%s/EF: the watch saw %v packets of the marked flow, want about 100", variant, packets)
				if !okA || arrOuter != w.outer {
					t.Errorf("%s/EF: arrival outer %v, want %v as sent", variant, arrOuter, w.outer)
				}
				if v, _ := r["verdict"].(string); !strings.Contains(v, w.verdict) {
					t.Errorf("%s: verdict %q does not say %q", variant, v, w.verdict)
				}
			}
			for v := range c.want {
				if !seen[v] {
					t.Errorf("no EF row for variant %s", v)
				}
			}
		})
	}
}
