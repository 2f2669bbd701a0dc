package qosspec

import (
	"fmt"
	"strings"
)

// Set-up names a Spec accepts.
const (
	// SpecPfifoFast is pfifo_fast at the root (the kernel's priority bands).
	SpecPfifoFast = "pfifo_fast"
	// SpecHTBPriority is an HTB tree at RateBps with a high-priority class
	// for the DSCP values.
	SpecHTBPriority = "htb-priority"
	// SpecTBF is a token bucket at RateBps with BurstBytes.
	SpecTBF = "tbf"
	// SpecBottleneck is a FIFO bottleneck at RateBps: a tbf whose queue
	// holds QueueBytes (0: 12 ms at the rate, at least 64 KiB).
	SpecBottleneck = "bottleneck"
	// SpecBandwidth is what the CNI bandwidth plugin puts on a pod's
	// host-side veth for its kubernetes.io/ingress-bandwidth and
	// egress-bandwidth annotations.
	SpecBandwidth = "bandwidth"
	// SpecPolice drops what arrives above RateBps (ingress qdisc, match-all
	// u32, police action), with BurstBytes.
	SpecPolice = "police"
	// SpecVXLANInherit makes the VXLAN devices of a node copy the inner
	// TOS to the outer header (tos inherit) and restores them after.
	SpecVXLANInherit = "vxlan-inherit"
)

// MetadataTunnelWhy says why SpecVXLANInherit cannot carry a mark
// across the metadata-mode (collect_md, "external") VXLAN devices named,
// such as Cilium's cilium_vxlan: the outer header of what they send is
// built from the tunnel key their owner's BPF program sets per packet
// (bpf_skb_set_tunnel_key, its TOS included), and the kernel's VXLAN
// transmit takes the TOS from that key, never from the device's setting.
func MetadataTunnelWhy(devs ...string) string {
	what := "is a metadata-mode VXLAN device"
	if len(devs) > 1 {
		what = "are metadata-mode VXLAN devices"
	}
	return fmt.Sprintf("%s %s (external, collect_md): the outer header's TOS comes from the tunnel key the CNI's BPF program sets "+
		"per packet, and the kernel ignores the device's tos inherit for such transmits, so no setting of the device carries the mark",
		strings.Join(devs, ", "), what)
}

// SpecSetups lists the set-ups a Spec can name.
var SpecSetups = []string{SpecPfifoFast, SpecHTBPriority, SpecTBF, SpecBottleneck, SpecBandwidth, SpecPolice, SpecVXLANInherit}

// QueueLimit is the size of a leaf FIFO: Bytes (a bfifo) or Packets (a
// pfifo), not both; zero for both means pfifo of 1000 packets.
type QueueLimit struct {
	Bytes   uint32 `json:"bytes,omitempty"`
	Packets uint32 `json:"packets,omitempty"`
}

// Spec is a traffic-control set-up as data, as a task carries it in JSON
// (e.g. {"setup":"tbf","rate_bps":20000000,"burst_bytes":32768}) and as a
// suite asks its environment for it. qos.Build turns it into the set-up it
// names and refuses fields that set-up does not use, so a typo cannot
// silently do nothing; whether the kernel takes the figures is checked
// there too, as that needs netlink's arithmetic.
type Spec struct {
	// Setup is one of SpecSetups.
	Setup string `json:"setup"`
	// RateBps is the htb parent rate, the tbf, bottleneck or police rate,
	// in bits/s.
	RateBps uint64 `json:"rate_bps,omitempty"`
	// HighRateBps is the htb high class's guaranteed rate (0: RateBps/2).
	HighRateBps uint64 `json:"high_rate_bps,omitempty"`
	// DSCP lists the values (0-63) the htb high class takes.
	DSCP []int `json:"dscp,omitempty"`
	// Leaf is the htb leaves' FIFO size.
	Leaf *QueueLimit `json:"leaf,omitempty"`
	// BurstBytes is the tbf or police bucket.
	BurstBytes uint32 `json:"burst_bytes,omitempty"`
	// LimitBytes is the tbf queue (0: rate × 25 ms + burst, as the CNI
	// bandwidth plugin).
	LimitBytes uint32 `json:"limit_bytes,omitempty"`
	// QueueBytes is the bottleneck's queue.
	QueueBytes uint32 `json:"queue_bytes,omitempty"`
	// IngressRateBps and IngressBurstBytes limit what a pod receives,
	// EgressRateBps and EgressBurstBytes what it sends (bandwidth); a
	// direction with rate 0 is not limited.
	IngressRateBps    uint64 `json:"ingress_rate_bps,omitempty"`
	IngressBurstBytes uint32 `json:"ingress_burst_bytes,omitempty"`
	EgressRateBps     uint64 `json:"egress_rate_bps,omitempty"`
	EgressBurstBytes  uint32 `json:"egress_burst_bytes,omitempty"`
}

// String describes the set-up in a line, for notes and logs.
func (s Spec) String() string {
	switch s.Setup {
	case SpecHTBPriority:
		return fmt.Sprintf("htb-priority rate %d bit/s, DSCP %v to the high class", s.RateBps, s.DSCP)
	case SpecTBF:
		return fmt.Sprintf("tbf rate %d bit/s burst %d B", s.RateBps, s.BurstBytes)
	case SpecBottleneck:
		return fmt.Sprintf("fifo bottleneck at %s", FormatBps(s.RateBps))
	case SpecBandwidth:
		return fmt.Sprintf("bandwidth limit ingress %s, egress %s", limitText(s.IngressRateBps), limitText(s.EgressRateBps))
	case SpecPolice:
		return fmt.Sprintf("police at %s burst %d B", FormatBps(s.RateBps), s.BurstBytes)
	}
	return s.Setup
}

func limitText(bps uint64) string {
	if bps == 0 {
		return "none"
	}
	return FormatBps(bps)
}

// FormatBps writes a rate with its unit ("1 Gbit/s", "12.5 Mbit/s").
func FormatBps(v uint64) string {
	units := []struct {
		div  float64
		name string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}}
	for _, u := range units {
		if float64(v) >= u.div {
			return fmt.Sprintf("%.4g %s", float64(v)/u.div, u.name)
		}
	}
	return fmt.Sprintf("%d bit/s", v)
}

// CheckBucket checks that a token bucket of burstBytes at rateBps fits the
// kernel's: no more than 4 s of tokens.
func CheckBucket(rateBps uint64, burstBytes uint32) error {
	if rateBps/8 == 0 {
		return fmt.Errorf("rate %d bit/s: below one byte per second", rateBps)
	}
	if float64(burstBytes)/float64(rateBps/8) > 4.0 {
		return fmt.Errorf("burst %d bytes at %d bit/s does not fit the kernel's token bucket (over 4 s of tokens)", burstBytes, rateBps)
	}
	return nil
}
