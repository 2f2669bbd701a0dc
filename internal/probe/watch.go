package probe

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// WatchFlow is the flow a wire watch (kind wire) singles out on a node's
// underlay: its protocol, addresses and ports as the sending pod sees
// them (the inner header when the path encapsulates). Packets from Src to
// Dst are the forward direction, packets from Dst to Src (ports swapped)
// the reverse.
type WatchFlow struct {
	// Proto is "udp", "tcp" or "icmp".
	Proto string `json:"proto"`
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	// SrcPort and DstPort narrow the flow (udp, tcp); 0 matches any port.
	SrcPort int `json:"src_port,omitempty"`
	DstPort int `json:"dst_port,omitempty"`
}

// IP protocol numbers of the flows a watch can follow.
var watchProtos = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17}

// ProtoNumber returns the flow's IP protocol number.
func (f WatchFlow) ProtoNumber() uint8 { return watchProtos[f.Proto] }

func (f WatchFlow) String() string {
	if f.Proto == "icmp" {
		return fmt.Sprintf("icmp %s → %s", f.Src, f.Dst)
	}
	port := func(p int) string {
		if p == 0 {
			return "*"
		}
		return fmt.Sprint(p)
	}
	return fmt.Sprintf("%s %s:%s → %s:%s", f.Proto, f.Src, port(f.SrcPort), f.Dst, port(f.DstPort))
}

// Validate checks the flow: a known protocol, two IPv4 addresses (the
// watch's kernel filter reads IPv4 headers), ports in range and none for
// icmp.
func (f WatchFlow) Validate() error {
	var errs []error
	if _, ok := watchProtos[f.Proto]; !ok {
		errs = append(errs, fmt.Errorf("watch.proto %q: want udp, tcp or icmp", f.Proto))
	}
	for _, a := range []struct{ name, v string }{{"src", f.Src}, {"dst", f.Dst}} {
		ip, err := netip.ParseAddr(a.v)
		switch {
		case strings.TrimSpace(a.v) == "":
			errs = append(errs, fmt.Errorf("watch.%s: missing (the flow's IPv4 address)", a.name))
		case err != nil:
			errs = append(errs, fmt.Errorf("watch.%s %q: not an IP address", a.name, a.v))
		case !ip.Unmap().Is4():
			errs = append(errs, fmt.Errorf("watch.%s %s: only IPv4 flows can be watched", a.name, a.v))
		}
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"src_port", f.SrcPort}, {"dst_port", f.DstPort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("watch.%s %d: must be 0-65535", p.name, p.v))
		}
		if p.v != 0 && f.Proto == "icmp" {
			errs = append(errs, fmt.Errorf("watch.%s %d: icmp has no ports", p.name, p.v))
		}
	}
	return errors.Join(errs...)
}

// WireDSCP is what a wire watch saw of its flow on a node's underlay
// (result key wire_dscp). The forward direction's figures are its own
// top-level keys (wire_dscp.outer, wire_dscp.inner, wire_dscp.encap,
// wire_dscp.packets); Reverse holds the other direction's.
type WireDSCP struct {
	// Interface is the device watched: the one the node's route to the
	// peer node leaves by.
	Interface string `json:"interface"`
	WireDirection
	Reverse WireDirection `json:"reverse"`
	// Dropped counts packets the kernel matched but could not queue to
	// the watch (PACKET_STATISTICS).
	Dropped int64 `json:"dropped_packets"`
}

// WireDirection is one direction of a watched flow: the header values
// most of its packets carried, and how many packets carried others.
type WireDirection struct {
	// Packets counts the direction's packets seen (GSO batches count
	// once: the watch sees what the device hands to the wire).
	Packets int64 `json:"packets"`
	// Encap is "vxlan" when the flow travelled inside VXLAN, "none" when
	// its own header was on the wire; empty when no packet was seen.
	Encap string `json:"encap,omitempty"`
	// Outer is the DSCP of the header on the wire (the outer header of a
	// VXLAN packet, else the packet's own).
	Outer *int `json:"outer,omitempty"`
	// Inner is the DSCP of the encapsulated header (VXLAN only).
	Inner *int `json:"inner,omitempty"`
	// Other counts packets whose encapsulation or DSCPs differed from
	// the most common ones reported above.
	Other int64 `json:"other_packets"`
}
