package icmp

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// An ICMP error quotes the packet that caused it from its IP header on, as
// the sending hop received it. The error queue (IP_RECVERR) hands over only
// the quoted payload, not that header, so trace reads the whole errors a
// second time on a raw ICMP socket (CAP_NET_RAW) to learn the TOS (traffic
// class) each hop saw: a hop's dscp_seen. Raw sockets get their copy before
// the protocol's error handler queues the error, so after a hop's answers
// have come in through the error queue, their quotes are already waiting.

// quoted is what an ICMP error says about the probe it quotes.
type quoted struct {
	tos      int // the quoted IPv4 TOS or IPv6 traffic class
	proto    int // the quoted packet's transport protocol
	dst      netip.Addr
	dstPort  int // UDP
	srcPort  int // UDP
	echoID   int // ICMP echo
	echoSeq  int // ICMP echo
	echoType int // ICMP echo: the quoted message's type
}

// openQuoteReader opens a raw ICMP socket of dst's family that receives
// only time-exceeded and destination-unreachable errors.
func openQuoteReader(v6 bool) (*conn, error) {
	c, err := openICMP(v6, SocketRaw, netip.Addr{})
	if err != nil {
		return nil, err
	}
	err = c.control(func(fd int) error {
		if v6 {
			var f unix.ICMPv6Filter
			for i := range f.Data {
				f.Data[i] = 0xffffffff // block
			}
			for _, typ := range []int{1, 3} { // destination unreachable, time exceeded
				f.Data[typ>>5] &^= 1 << (typ & 31)
			}
			return unix.SetsockoptICMPv6Filter(fd, unix.IPPROTO_ICMPV6, unix.ICMPV6_FILTER, &f)
		}
		// Bit n set blocks ICMP type n: pass 3 and 11.
		return unix.SetsockoptInt(fd, unix.SOL_RAW, unix.ICMP_FILTER, ^(1<<3 | 1<<11))
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("filter ICMP errors: %w", err)
	}
	return c, nil
}

// parseQuote reads the packet quoted by an ICMP error message (ICMP header
// first). ok is false when msg is not an error, or its quote is too short
// to hold the IP header and the transport header's identifying fields.
func parseQuote(msg []byte, v6 bool) (q quoted, ok bool) {
	if len(msg) < 8 {
		return q, false
	}
	typ := msg[0]
	if v6 && typ != 1 && typ != 3 || !v6 && typ != 3 && typ != 11 {
		return q, false
	}
	in := msg[8:]
	var l4 []byte
	if v6 {
		if len(in) < 40 || in[0]>>4 != 6 {
			return q, false
		}
		q.tos = int(in[0]&0x0f)<<4 | int(in[1]>>4)
		q.proto = int(in[6])
		q.dst = netip.AddrFrom16([16]byte(in[24:40])).Unmap()
		l4 = in[40:]
	} else {
		if len(in) < 20 || in[0]>>4 != 4 {
			return q, false
		}
		ihl := int(in[0]&0x0f) * 4
		if ihl < 20 || len(in) < ihl {
			return q, false
		}
		q.tos = int(in[1])
		q.proto = int(in[9])
		q.dst = netip.AddrFrom4([4]byte(in[16:20]))
		l4 = in[ihl:]
	}
	be := binary.BigEndian
	switch q.proto {
	case unix.IPPROTO_UDP:
		if len(l4) < 4 {
			return q, false
		}
		q.srcPort, q.dstPort = int(be.Uint16(l4[0:2])), int(be.Uint16(l4[2:4]))
	case unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6:
		if len(l4) < 8 {
			return q, false
		}
		q.echoType, q.echoID, q.echoSeq = int(l4[0]), int(be.Uint16(l4[4:6])), int(be.Uint16(l4[6:8]))
	default:
		return q, false
	}
	return q, true
}

// readQuotes takes every ICMP error waiting on the quote socket now and
// records, for each probe it quotes, the DSCP that hop saw.
func (r *traceRun) readQuotes(buf, oob []byte) {
	if r.quotes == nil {
		return
	}
	for {
		p, err := r.quotes.recvNow(buf, oob, false)
		if err != nil {
			return
		}
		q, ok := parseQuote(p.data, r.c.v6)
		if !ok || q.dst != r.dst.WithZone("") {
			continue
		}
		i := -1
		switch {
		case r.icmp && (q.proto == unix.IPPROTO_ICMP || q.proto == unix.IPPROTO_ICMPV6):
			if q.echoID == r.id && (q.echoType == 8 || q.echoType == 128) {
				i = r.index(q.echoSeq)
			}
		case !r.icmp && q.proto == unix.IPPROTO_UDP:
			if q.srcPort == r.localPort {
				i = q.dstPort - TraceBasePort
			}
		}
		if i < 0 || i >= len(r.probes) {
			continue
		}
		r.probes[i].dscpSeen, r.probes[i].dscpSeenOK = q.tos>>2, true
	}
}
