package wirewatch

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/cnperf/cnperf/internal/probe"
)

// ipv4 crafts an IPv4 packet: header (with optLen bytes of options),
// then the transport header's ports, then payload.
func ipv4(tos byte, proto byte, src, dst string, optLen int, l4 []byte) []byte {
	ihl := 20 + optLen
	b := make([]byte, ihl, ihl+len(l4))
	b[0] = 0x40 | byte(ihl/4)
	b[1] = tos
	binary.BigEndian.PutUint16(b[2:], uint16(ihl+len(l4)))
	b[8], b[9] = 64, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return append(b, l4...)
}

// ipv6 crafts an IPv6 packet with traffic class tc.
func ipv6(tc byte, proto byte, src, dst string, l4 []byte) []byte {
	b := make([]byte, 40, 40+len(l4))
	b[0] = 0x60 | tc>>4
	b[1] = tc << 4
	binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
	b[6], b[7] = proto, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, l4...)
}

// ports crafts a UDP (or the first 8 bytes of a TCP) header and payload.
func ports(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// vxlan crafts a VXLAN header with vni and an Ethernet frame (tagged with
// a VLAN when vlan is set) around pkt.
func vxlan(vni uint32, vlan bool, pkt []byte) []byte {
	h := make([]byte, 8)
	h[0] = 0x08
	binary.BigEndian.PutUint32(h[4:], vni<<8)
	eth := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}
	if vlan {
		eth = append(eth, 0x81, 0x00, 0x00, 0x07)
	}
	etype := []byte{0x08, 0x00}
	if pkt[0]>>4 == 6 {
		etype = []byte{0x86, 0xdd}
	}
	eth = append(eth, etype...)
	return append(append(h, eth...), pkt...)
}

const (
	podA, podB   = "10.244.2.2", "10.244.1.2"
	nodeA, nodeB = "10.170.0.12", "10.170.0.11"
	ef           = 46 << 2
)

// TestDecode decodes crafted packets as AF_PACKET SOCK_DGRAM hands them
// over: plain flows, VXLAN on both ports with the outer TOS 0 or
// inherited, a VLAN-tagged inner frame, IP options, IPv6, and damaged
// packets.
func TestDecode(t *testing.T) {
	inner := ipv4(ef, protoUDP, podA, podB, 0, ports(61000, 5201, []byte("payload")))
	innerOpts := ipv4(ef|1, protoUDP, podA, podB, 8, ports(61000, 5201, nil))
	tests := []struct {
		name    string
		pkt     []byte
		want    Packet
		wantErr string
	}{
		{"plain udp EF", inner,
			Packet{Encap: EncapNone, OuterDSCP: 46, InnerDSCP: 46, Proto: protoUDP, SrcPort: 61000, DstPort: 5201}, ""},
		{"vxlan 8472, outer TOS 0", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(33000, PortVXLANLinux, vxlan(1, false, inner))),
			Packet{Encap: EncapVXLAN, OuterDSCP: 0, InnerDSCP: 46, VNI: 1, Proto: protoUDP, SrcPort: 61000, DstPort: 5201}, ""},
		{"vxlan 4789, tos inherit", ipv4(ef, protoUDP, nodeA, nodeB, 0, ports(33000, PortVXLAN, vxlan(4096, false, inner))),
			Packet{Encap: EncapVXLAN, OuterDSCP: 46, InnerDSCP: 46, VNI: 4096, Proto: protoUDP, SrcPort: 61000, DstPort: 5201}, ""},
		{"vxlan, vlan-tagged inner frame, options both", ipv4(0x20, protoUDP, nodeA, nodeB, 4, ports(33000, PortVXLAN, vxlan(7, true, innerOpts))),
			Packet{Encap: EncapVXLAN, OuterDSCP: 8, InnerDSCP: 46, VNI: 7, Proto: protoUDP, SrcPort: 61000, DstPort: 5201}, ""},
		{"udp to 8472 without the VNI flag is plain", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(33000, PortVXLANLinux, make([]byte, 40))),
			Packet{Encap: EncapNone, Proto: protoUDP, SrcPort: 33000, DstPort: PortVXLANLinux}, ""},
		{"icmp", ipv4(ef, protoICMP, podA, podB, 0, []byte{8, 0, 0, 0, 0, 1, 0, 1}),
			Packet{Encap: EncapNone, OuterDSCP: 46, InnerDSCP: 46, Proto: protoICMP}, ""},
		{"ipv6 tcp", ipv6(ef, protoTCP, "fd00::1", "fd00::2", ports(40000, 80, nil)),
			Packet{Encap: EncapNone, OuterDSCP: 46, InnerDSCP: 46, Proto: protoTCP, SrcPort: 40000, DstPort: 80}, ""},
		{"vxlan carrying ipv6", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(1, PortVXLAN, vxlan(1, false, ipv6(ef, protoUDP, "fd00::1", "fd00::2", ports(5, 6, nil))))),
			Packet{Encap: EncapVXLAN, OuterDSCP: 0, InnerDSCP: 46, VNI: 1, Proto: protoUDP, SrcPort: 5, DstPort: 6}, ""},
		{"empty", nil, Packet{}, "too short"},
		{"not ip", []byte{0x10, 0, 0, 0}, Packet{}, "ip version 1"},
		{"ihl below 20", []byte{0x44, 0, 0, 0}, Packet{}, "below 20"},
		{"ipv4 cut", inner[:12], Packet{}, "too short"},
		{"ports cut", inner[:22], Packet{}, "ports"},
		{"inner frame not ip", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(1, PortVXLAN, append(append([]byte{8, 0, 0, 0, 0, 0, 1, 0}, make([]byte, 12)...), 0x08, 0x06))),
			Packet{}, "not IP"},
		{"inner frame cut", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(1, PortVXLAN, vxlan(1, false, inner)[:30])), Packet{}, "vxlan payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.pkt)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode: err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got.Src, got.Dst = netip.Addr{}, netip.Addr{}
			if got != tt.want {
				t.Errorf("Decode:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	// The flow's addresses are the inner header's.
	p, err := Decode(ipv4(0, protoUDP, nodeA, nodeB, 0, ports(33000, PortVXLANLinux, vxlan(1, false, inner))))
	if err != nil || p.Src.String() != podA || p.Dst.String() != podB {
		t.Errorf("vxlan flow addresses %s → %s (%v), want %s → %s", p.Src, p.Dst, err, podA, podB)
	}
}

// TestProgram runs the kernel filter in x/net/bpf's virtual machine over
// crafted packets: it passes the flow both ways, plain and inside VXLAN
// (both ports, inner IP options), and drops the flood beside it (same
// pods, another source port), other pods, other protocols, IPv6 and
// VXLAN carrying something else.
func TestProgram(t *testing.T) {
	flow := probe.WatchFlow{Proto: "udp", Src: podA, Dst: podB, SrcPort: 61000, DstPort: 5201}
	prog, err := Program(flow)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("the program does not load: %v", err)
	}
	fwd := ipv4(ef, protoUDP, podA, podB, 0, ports(61000, 5201, make([]byte, 100)))
	rev := ipv4(ef, protoUDP, podB, podA, 0, ports(5201, 61000, nil))
	flood := ipv4(0, protoUDP, podA, podB, 0, ports(45000, 5201, make([]byte, 1400)))
	encap := func(port uint16, pkt []byte) []byte {
		return ipv4(0, protoUDP, nodeA, nodeB, 0, ports(40000, port, vxlan(1, false, pkt)))
	}
	tests := []struct {
		name string
		pkt  []byte
		pass bool
	}{
		{"forward plain", fwd, true},
		{"reverse plain", rev, true},
		{"forward in vxlan 8472", encap(PortVXLANLinux, fwd), true},
		{"reverse in vxlan 4789", encap(PortVXLAN, rev), true},
		{"forward in vxlan, inner options", encap(PortVXLAN, ipv4(ef, protoUDP, podA, podB, 12, ports(61000, 5201, nil))), true},
		{"flood plain", flood, false},
		{"flood in vxlan", encap(PortVXLANLinux, flood), false},
		{"other destination port", ipv4(ef, protoUDP, podA, podB, 0, ports(61000, 5202, nil)), false},
		{"other pod", ipv4(ef, protoUDP, "10.244.2.3", podB, 0, ports(61000, 5201, nil)), false},
		{"tcp between the pods", ipv4(ef, protoTCP, podA, podB, 0, ports(61000, 5201, nil)), false},
		{"vxlan to another port", ipv4(0, protoUDP, nodeA, nodeB, 0, ports(40000, 4790, vxlan(1, false, fwd))), false},
		{"ipv6", ipv6(ef, protoUDP, "fd00::1", "fd00::2", ports(61000, 5201, nil)), false},
		{"vxlan carrying ipv6", encap(PortVXLAN, ipv6(ef, protoUDP, "fd00::1", "fd00::2", ports(61000, 5201, nil))), false},
		{"cut short", fwd[:10], false},
	}
	for _, tt := range tests {
		n, err := vm.Run(tt.pkt)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if pass := n > 0; pass != tt.pass {
			t.Errorf("%s: passed %d bytes, want pass %v", tt.name, n, tt.pass)
		}
		if n > SnapLen {
			t.Errorf("%s: passed %d bytes, more than SnapLen %d", tt.name, n, SnapLen)
		}
	}

	// Wildcard ports and icmp: the pods' packets of that protocol.
	for _, c := range []struct {
		flow probe.WatchFlow
		pkt  []byte
		pass bool
	}{
		{probe.WatchFlow{Proto: "udp", Src: podA, Dst: podB, DstPort: 5201}, flood, true},
		{probe.WatchFlow{Proto: "icmp", Src: podB, Dst: podA}, encap(PortVXLANLinux, ipv4(ef, protoICMP, podA, podB, 0, []byte{0, 0, 0, 0})), true},
		{probe.WatchFlow{Proto: "icmp", Src: podB, Dst: podA}, flood, false},
		{probe.WatchFlow{Proto: "tcp", Src: podA, Dst: podB, SrcPort: 61000}, ipv4(0, protoTCP, podA, podB, 0, ports(61000, 1, nil)), true},
	} {
		prog, err := Program(c.flow)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := vm.Run(c.pkt); err != nil || (n > 0) != c.pass {
			t.Errorf("%s: passed %d bytes (%v), want pass %v", c.flow, n, err, c.pass)
		}
	}
}

// TestTally: the most common headers are reported, the others counted.
func TestTally(t *testing.T) {
	var tl tally
	vx := Packet{Encap: EncapVXLAN, OuterDSCP: 0, InnerDSCP: 46}
	for range 5 {
		tl.add(vx)
	}
	tl.add(Packet{Encap: EncapVXLAN, OuterDSCP: 46, InnerDSCP: 46})
	d := tl.summary()
	if d.Packets != 6 || d.Encap != EncapVXLAN || d.Outer == nil || *d.Outer != 0 || d.Inner == nil || *d.Inner != 46 || d.Other != 1 {
		t.Errorf("summary %+v, want 6 packets, vxlan outer 0 inner 46, 1 other", d)
	}
	var plain tally
	plain.add(Packet{Encap: EncapNone, OuterDSCP: 46, InnerDSCP: 46})
	if d := plain.summary(); d.Inner != nil || *d.Outer != 46 || d.Encap != EncapNone {
		t.Errorf("plain summary %+v, want outer 46, no inner", d)
	}
	if d := (tally{}).summary(); d.Packets != 0 || d.Outer != nil || d.Encap != "" {
		t.Errorf("empty summary %+v, want nothing", d)
	}
}

// TestValidate: bad flows are refused with the field named.
func TestValidate(t *testing.T) {
	good := probe.Spec{Kind: probe.KindWire, Target: nodeB, Watch: &probe.WatchFlow{Proto: "udp", Src: podA, Dst: podB, DstPort: 5201}}
	if err := (Prober{}).Validate(good); err != nil {
		t.Fatalf("good spec refused: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*probe.Spec)
		want string
	}{
		{"no flow", func(s *probe.Spec) { s.Watch = nil }, "watch: missing"},
		{"sctp", func(s *probe.Spec) { s.Watch.Proto = "sctp" }, "watch.proto"},
		{"ipv6", func(s *probe.Spec) { s.Watch.Src = "fd00::1" }, "only IPv4"},
		{"bad dst", func(s *probe.Spec) { s.Watch.Dst = "pod-b" }, "watch.dst"},
		{"port", func(s *probe.Spec) { s.Watch.SrcPort = 70000 }, "watch.src_port"},
		{"icmp port", func(s *probe.Spec) { s.Watch.Proto = "icmp" }, "icmp has no ports"},
		{"cap", func(s *probe.Spec) { s.Count = MaxPacketCap + 1 }, "at most"},
		{"no target", func(s *probe.Spec) { s.Target = "" }, "target"},
	} {
		s := good
		w := *good.Watch
		s.Watch = &w
		c.edit(&s)
		if err := (Prober{}).Validate(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}
