package wirewatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// VXLAN's UDP ports: the IANA port (Calico) and the Linux default that
// Flannel and Cilium use.
const (
	PortVXLAN      = 4789
	PortVXLANLinux = 8472
)

// IP protocol numbers.
const (
	protoICMP = 1
	protoTCP  = 6
	protoUDP  = 17
)

// Encapsulations a packet can be seen in.
const (
	EncapNone  = "none"
	EncapVXLAN = "vxlan"
)

// Packet is what the watch reads from one packet's headers.
type Packet struct {
	// Encap is EncapVXLAN when the packet is a VXLAN datagram carrying an
	// IP packet, else EncapNone.
	Encap string
	// OuterDSCP is the DSCP of the header on the wire; InnerDSCP that of
	// the encapsulated header (VXLAN), else equal to OuterDSCP.
	OuterDSCP, InnerDSCP int
	// VNI is the VXLAN network identifier (VXLAN only).
	VNI uint32
	// The flow: the inner header's when encapsulated. Ports are 0 for
	// protocols without them.
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// errShort says a header was cut off (the capture is truncated to
// SnapLen, which holds every header the decoder reads).
var errShort = errors.New("packet too short")

// Decode reads a packet that starts at its IP header (an AF_PACKET
// SOCK_DGRAM read): the outer IPv4 or IPv6 header and, when it is a VXLAN
// datagram (UDP to 4789 or 8472 with the VNI flag), the inner Ethernet
// frame's IP header and ports.
func Decode(b []byte) (Packet, error) {
	p, l4, err := decodeIP(b)
	if err != nil {
		return Packet{}, err
	}
	p.Encap = EncapNone
	p.InnerDSCP = p.OuterDSCP
	if p.Proto != protoUDP || (p.DstPort != PortVXLAN && p.DstPort != PortVXLANLinux) {
		return p, nil
	}
	// UDP header (8), VXLAN header (8): flags with the I bit, VNI.
	vx := l4 + 8
	if len(b) < vx+8 || b[vx]&0x08 == 0 {
		return p, nil // to a VXLAN port but not VXLAN: the plain datagram
	}
	frame := b[vx+8:]
	inner, err := DecodeFrame(frame)
	if err != nil {
		return Packet{}, fmt.Errorf("vxlan payload: %w", err)
	}
	inner.Encap = EncapVXLAN
	inner.InnerDSCP = inner.OuterDSCP
	inner.OuterDSCP = p.OuterDSCP
	inner.VNI = binary.BigEndian.Uint32(b[vx+4:vx+8]) >> 8
	return inner, nil
}

// DecodeFrame reads an Ethernet frame (optionally 802.1Q-tagged) carrying
// IPv4 or IPv6: the frame a VXLAN datagram carries. The result's
// OuterDSCP is the frame's IP header's DSCP.
func DecodeFrame(f []byte) (Packet, error) {
	if len(f) < 14 {
		return Packet{}, fmt.Errorf("ethernet header: %w", errShort)
	}
	off, etype := 12, binary.BigEndian.Uint16(f[12:14])
	for etype == 0x8100 || etype == 0x88a8 {
		off += 4
		if len(f) < off+2 {
			return Packet{}, fmt.Errorf("vlan tag: %w", errShort)
		}
		etype = binary.BigEndian.Uint16(f[off : off+2])
	}
	if etype != 0x0800 && etype != 0x86dd {
		return Packet{}, fmt.Errorf("ethertype 0x%04x: not IP", etype)
	}
	p, _, err := decodeIP(f[off+2:])
	return p, err
}

// decodeIP reads an IPv4 or IPv6 header and the ports after it; l4 is the
// offset of the transport header.
func decodeIP(b []byte) (p Packet, l4 int, err error) {
	if len(b) < 1 {
		return p, 0, fmt.Errorf("ip header: %w", errShort)
	}
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 {
			return p, 0, fmt.Errorf("ipv4 header length %d: below 20", ihl)
		}
		if len(b) < ihl {
			return p, 0, fmt.Errorf("ipv4 header: %w", errShort)
		}
		p.OuterDSCP = int(b[1] >> 2)
		p.Proto = b[9]
		p.Src = netip.AddrFrom4([4]byte(b[12:16]))
		p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		l4 = ihl
		// A fragment after the first carries no transport header.
		if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 {
			return p, l4, nil
		}
	case 6:
		if len(b) < 40 {
			return p, 0, fmt.Errorf("ipv6 header: %w", errShort)
		}
		tc := (b[0]&0x0f)<<4 | b[1]>>4
		p.OuterDSCP = int(tc >> 2)
		p.Proto = b[6]
		p.Src = netip.AddrFrom16([16]byte(b[8:24]))
		p.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		l4 = 40
	default:
		return p, 0, fmt.Errorf("ip version %d: not 4 or 6", b[0]>>4)
	}
	if p.Proto == protoTCP || p.Proto == protoUDP {
		if len(b) < l4+4 {
			return p, 0, fmt.Errorf("ports: %w", errShort)
		}
		p.SrcPort = binary.BigEndian.Uint16(b[l4 : l4+2])
		p.DstPort = binary.BigEndian.Uint16(b[l4+2 : l4+4])
	}
	return p, l4, nil
}
