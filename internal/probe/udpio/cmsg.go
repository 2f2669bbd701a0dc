package udpio

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Meta is what the kernel said about one received datagram.
type Meta struct {
	TOS      int   // TOS / traffic class byte on arrival, valid when TOSOK
	TOSOK    bool  //
	KernelNs int64 // kernel receive timestamp (SO_TIMESTAMPNS, ns since the epoch); 0 if absent
	// SegSize is the GRO segment size of the super-packet the datagram came
	// in (0 when it came alone).
	SegSize int
	// Drops is the socket's cumulative count of datagrams the kernel dropped
	// because the receive buffer was full (SO_RXQ_OVFL), valid when DropsOK.
	Drops   uint32
	DropsOK bool
	// TTL is the IPv4 TTL or IPv6 hop limit on arrival (IP_RECVTTL /
	// IPV6_RECVHOPLIMIT), valid when TTLOK.
	TTL   int
	TTLOK bool
}

// TOSCmsg is the control message that puts tos on one sent datagram:
// IP_TOS for an IPv4 destination (a v4-mapped one on a v6 socket
// included, which the kernel sends on its IPv4 path), IPV6_TCLASS for an
// IPv6 one (v6).
func TOSCmsg(tos int, v6 bool) []byte {
	level, typ := unix.IPPROTO_IP, unix.IP_TOS
	if v6 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(tos))
	return b
}

// ParseCmsgs reads the control messages cnperf asks for, without
// allocating.
func ParseCmsgs(oob []byte) Meta {
	var m Meta
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			m.TOS, m.TOSOK = int(data[0]), true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			m.TOS, m.TOSOK = int(binary.NativeEndian.Uint32(data)), true
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16:
			sec := int64(binary.NativeEndian.Uint64(data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(data[8:16]))
			m.KernelNs = sec*1e9 + nsec
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TTL && len(data) >= 4,
			h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(data) >= 4:
			m.TTL, m.TTLOK = int(binary.NativeEndian.Uint32(data)), true
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			m.SegSize = int(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			m.Drops, m.DropsOK = binary.NativeEndian.Uint32(data), true
		}
		next := unix.CmsgSpace(l - unix.CmsgLen(0))
		if next > len(oob) {
			break
		}
		oob = oob[next:]
	}
	return m
}

// putIntCmsg writes one control message carrying a native int into b and
// returns its length (unix.CmsgSpace(4)).
func putIntCmsg(b []byte, level, typ int32, v int32) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(v))
	return unix.CmsgSpace(4)
}

// putUint16Cmsg writes a control message carrying a uint16 (UDP_SEGMENT).
func putUint16Cmsg(b []byte, level, typ int32, v uint16) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], v)
	return unix.CmsgSpace(2)
}
