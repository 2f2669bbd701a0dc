package wirewatch

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"

	"github.com/cnperf/cnperf/internal/probe"
)

// SnapLen is how much of each packet the kernel filter passes to the
// watch: every header Decode reads (outer IPv4 with options 60, UDP 8,
// VXLAN 8, inner Ethernet with a tag 18, inner IPv4 with options 60,
// ports 4) fits.
const SnapLen = 192

// flow is a WatchFlow parsed.
type flow struct {
	proto        uint8
	src, dst     netip.Addr
	sport, dport uint16
}

func flowOf(w probe.WatchFlow) (flow, error) {
	if err := w.Validate(); err != nil {
		return flow{}, err
	}
	src, _ := netip.ParseAddr(w.Src)
	dst, _ := netip.ParseAddr(w.Dst)
	return flow{proto: w.ProtoNumber(), src: src.Unmap(), dst: dst.Unmap(), sport: uint16(w.SrcPort), dport: uint16(w.DstPort)}, nil
}

// Directions of a packet relative to the watched flow.
const (
	dirNone = iota
	dirForward
	dirReverse
)

// direction says whether p belongs to the flow, and which way it goes.
func (f flow) direction(p Packet) int {
	if p.Proto != f.proto {
		return dirNone
	}
	port := func(want, got uint16) bool { return want == 0 || want == got }
	switch {
	case p.Src == f.src && p.Dst == f.dst && port(f.sport, p.SrcPort) && port(f.dport, p.DstPort):
		return dirForward
	case p.Src == f.dst && p.Dst == f.src && port(f.dport, p.SrcPort) && port(f.sport, p.DstPort):
		return dirReverse
	}
	return dirNone
}

// asm is a classic BPF program with symbolic jump targets, resolved by
// assemble.
type asm struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  []jumpRef
}

type jumpRef struct {
	at          int
	true, false string // "" falls through
}

func (a *asm) op(i bpf.Instruction) { a.ins = append(a.ins, i) }

func (a *asm) label(name string) { a.labels[name] = len(a.ins) }

// jif jumps to t when A cond val holds, else to f ("" falls through).
func (a *asm) jif(cond bpf.JumpTest, val uint32, t, f string) {
	a.jumps = append(a.jumps, jumpRef{at: len(a.ins), true: t, false: f})
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

// jmp jumps to t.
func (a *asm) jmp(t string) {
	a.jumps = append(a.jumps, jumpRef{at: len(a.ins), true: t})
	a.ins = append(a.ins, bpf.Jump{})
}

func (a *asm) assemble() ([]bpf.Instruction, error) {
	skip := func(at int, name string) (uint32, error) {
		if name == "" {
			return 0, nil
		}
		to, ok := a.labels[name]
		if !ok || to <= at {
			return 0, fmt.Errorf("bpf: jump to %q: no such label after %d", name, at)
		}
		return uint32(to - at - 1), nil
	}
	for _, j := range a.jumps {
		t, err := skip(j.at, j.true)
		if err != nil {
			return nil, err
		}
		switch in := a.ins[j.at].(type) {
		case bpf.Jump:
			in.Skip = t
			a.ins[j.at] = in
		case bpf.JumpIf:
			f, err := skip(j.at, j.false)
			if err != nil {
				return nil, err
			}
			if t > 255 || f > 255 {
				return nil, fmt.Errorf("bpf: jump at %d too long", j.at)
			}
			in.SkipTrue, in.SkipFalse = uint8(t), uint8(f)
			a.ins[j.at] = in
		}
	}
	return a.ins, nil
}

// Scratch memory slots of the program.
const (
	memSrc = 0
	memDst = 1
)

// Program is the kernel filter for f, for packets that start at their IP
// header (AF_PACKET SOCK_DGRAM): IPv4 packets of the flow in either
// direction, on the wire as they are or inside VXLAN (outer UDP to 4789
// or 8472, inner Ethernet carrying IPv4). It passes SnapLen bytes of a
// match and drops everything else, so a flood beside the flow (even one
// between the same pods) never reaches the watch.
func Program(w probe.WatchFlow) ([]bpf.Instruction, error) {
	f, err := flowOf(w)
	if err != nil {
		return nil, err
	}
	a := &asm{labels: map[string]int{}}
	u32 := func(ip netip.Addr) uint32 { b := ip.As4(); return binary.BigEndian.Uint32(b[:]) }
	hasPorts := f.proto == protoTCP || f.proto == protoUDP

	// Outer IPv4; X = its header length.
	a.op(bpf.LoadAbsolute{Off: 0, Size: 1})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
	a.jif(bpf.JumpNotEqual, 0x40, "drop", "")
	a.op(bpf.LoadMemShift{Off: 0})
	a.op(bpf.LoadAbsolute{Off: 9, Size: 1})
	if f.proto == protoUDP {
		a.jif(bpf.JumpEqual, protoUDP, "", "drop")
	} else {
		a.jif(bpf.JumpEqual, protoUDP, "", "plain")
	}
	// UDP: to a VXLAN port, else (for a udp flow) the plain datagram.
	notVXLAN := "drop"
	if f.proto == protoUDP {
		notVXLAN = "plain"
	}
	a.op(bpf.LoadIndirect{Off: 2, Size: 2})
	a.jif(bpf.JumpEqual, PortVXLAN, "vxlan", "")
	a.jif(bpf.JumpEqual, PortVXLANLinux, "vxlan", notVXLAN)

	// Inner frame at X+16 (UDP 8, VXLAN 8): Ethernet, IPv4 at X+30.
	a.label("vxlan")
	a.op(bpf.LoadIndirect{Off: 28, Size: 2})
	a.jif(bpf.JumpEqual, 0x0800, "", "drop")
	a.op(bpf.LoadIndirect{Off: 30 + 9, Size: 1})
	a.jif(bpf.JumpEqual, uint32(f.proto), "", "drop")
	a.op(bpf.LoadIndirect{Off: 30 + 12, Size: 4})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: memSrc})
	a.op(bpf.LoadIndirect{Off: 30 + 16, Size: 4})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: memDst})
	// X = offset of the inner transport header: X + 30 + inner IHL.
	a.op(bpf.LoadIndirect{Off: 30, Size: 1})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2})
	a.op(bpf.ALUOpX{Op: bpf.ALUOpAdd})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 30})
	a.op(bpf.TAX{})
	a.jmp("match")

	// Unencapsulated: the outer header is the flow's (A holds its
	// protocol unless it came through the UDP branch).
	a.label("plain")
	a.op(bpf.LoadAbsolute{Off: 9, Size: 1})
	a.jif(bpf.JumpEqual, uint32(f.proto), "", "drop")
	a.op(bpf.LoadAbsolute{Off: 12, Size: 4})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: memSrc})
	a.op(bpf.LoadAbsolute{Off: 16, Size: 4})
	a.op(bpf.StoreScratch{Src: bpf.RegA, N: memDst})

	// Addresses and ports, either way round; X is at the ports.
	a.label("match")
	side := func(src, dst netip.Addr, sport, dport uint16, miss string) {
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: memSrc})
		a.jif(bpf.JumpEqual, u32(src), "", miss)
		a.op(bpf.LoadScratch{Dst: bpf.RegA, N: memDst})
		a.jif(bpf.JumpEqual, u32(dst), "", miss)
		if hasPorts && sport != 0 {
			a.op(bpf.LoadIndirect{Off: 0, Size: 2})
			a.jif(bpf.JumpEqual, uint32(sport), "", miss)
		}
		if hasPorts && dport != 0 {
			a.op(bpf.LoadIndirect{Off: 2, Size: 2})
			a.jif(bpf.JumpEqual, uint32(dport), "", miss)
		}
		a.op(bpf.RetConstant{Val: SnapLen})
	}
	side(f.src, f.dst, f.sport, f.dport, "reverse")
	a.label("reverse")
	side(f.dst, f.src, f.dport, f.sport, "drop")
	a.label("drop")
	a.op(bpf.RetConstant{Val: 0})
	return a.assemble()
}
