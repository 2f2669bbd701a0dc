package suite

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/qosspec"
)

// A TunnelRemedy says what carries a pod's DSCP mark to the outer header
// of a CNI's tunnel, where the CNI itself leaves the outer header
// unmarked (the mark is "lost at encapsulation"): a setting of the node's
// tunnel device (tos inherit, which cnperf applies as CapVXLANTOS with
// the allow-node-qdisc opt-in), a setting of the CNI, or nothing.
type TunnelRemedy struct {
	CNI   string `json:"cni"`
	Encap string `json:"encap"`
	// Device is the CNI's tunnel device on a node.
	Device string `json:"device"`
	// TOSInherit says the device's tos inherit carries the mark (a
	// setting of the node, not of the CNI).
	TOSInherit bool `json:"tos_inherit,omitempty"`
	// Setting names a setting of the CNI that carries it ("" none).
	Setting string `json:"setting,omitempty"`
	// Nothing says why nothing carries it, where that is so.
	Nothing string `json:"nothing,omitempty"`
	// Checked is the CNI release this was checked against.
	Checked string `json:"checked"`
}

// TunnelRemedies are the CNIs' tunnels as cnperf knows them. Each fact
// about what carries a mark across a CNI's tunnel is here and nowhere
// else; whether a device is in metadata mode is read off the nodes
// (Caps.MetadataTunnels), not taken from here.
var TunnelRemedies = []TunnelRemedy{
	{CNI: "calico", Encap: EncapVXLAN, Device: "vxlan.calico", TOSInherit: true, Checked: "v3.31.0"},
	{CNI: "flannel", Encap: EncapVXLAN, Device: "flannel.1", TOSInherit: true, Checked: "v0.28.10"},
	{CNI: "cilium", Encap: EncapVXLAN, Device: "cilium_vxlan", Checked: "v1.20.2",
		Nothing: "no setting of Cilium carries it: its BPF datapath sets the tunnel key without a TOS (bpf/lib/overloadable_skb.h)"},
}

// RemedyFor returns what cnperf knows of cni's tunnel for encap.
func RemedyFor(cni, encap string) (TunnelRemedy, bool) {
	for _, r := range TunnelRemedies {
		if r.CNI == cni && r.Encap == encap {
			return r, true
		}
	}
	return TunnelRemedy{}, false
}

// MarkCarrier says in words what carries a mark lost at encapsulation on
// a path whose metadata-mode tunnel devices are metadata (detected; none
// for a classic VXLAN device) and whose CNI is cni ("" not known), and
// whether it is the device's tos inherit (which cnperf can apply).
func MarkCarrier(cni, encap string, metadata []string) (text string, tosInherit bool) {
	r, known := RemedyFor(cni, encap)
	switch {
	case len(metadata) > 0 && known && r.Nothing != "":
		return fmt.Sprintf("tos inherit cannot carry it: %s; %s", qosspec.MetadataTunnelWhy(metadata...), r.Nothing), false
	case len(metadata) > 0 && known && r.Setting != "":
		return fmt.Sprintf("tos inherit cannot carry it: %s; the setting of %s that does: %s", qosspec.MetadataTunnelWhy(metadata...), cni, r.Setting), false
	case len(metadata) > 0:
		who := "the CNI"
		if cni != "" {
			who = cni
		}
		return fmt.Sprintf("tos inherit cannot carry it: %s; only a setting of %s could", qosspec.MetadataTunnelWhy(metadata...), who), false
	case known && r.Setting != "":
		return fmt.Sprintf("the setting of %s that carries it: %s", cni, r.Setting), false
	}
	dev := "the tunnel device"
	if known {
		dev = r.Device
	}
	return strings.TrimSpace(fmt.Sprintf("tos inherit on %s carries it", dev)), true
}
