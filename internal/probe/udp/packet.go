package udp

import (
	"encoding/binary"
	"fmt"

	"github.com/cnperf/cnperf/internal/probe/engine"
)

// HeaderLen is the smallest udp probe datagram: the 12-byte packet header,
// the sequence number and the send timestamp.
const HeaderLen = engine.PacketHeaderLen + 8 + 8

// Flags in the packet header.
const (
	// FlagHello marks the datagram a reverse-mode client sends so that the
	// responder (and any NAT on the way) learns where to send.
	FlagHello = 1
	// FlagResult marks a receiving responder's result sent as a datagram
	// (JSON after the packet header) beside the control connection, which
	// may be stalled (see resultDatagram).
	FlagResult = 2
	// FlagCookie marks the datagram a reverse-mode responder sends to the
	// address a hello came from, carrying the cookie the client must echo
	// on the control connection before any data goes there.
	FlagCookie = 4
)

// CookieLen is the size of the cookie after the packet header.
const CookieLen = 16

// maxResultDatagram bounds a result datagram: beyond it (a long test's
// intervals) the result goes on the control connection only.
const maxResultDatagram = 60000

// resultDatagram is a receiving responder's result as a datagram to the
// client's data socket, or nil when it is too large. A limit on what the
// responder's side receives (the CNI's ingress-bandwidth tbf with its
// half-gigabyte queue) can hold the client's stop and the acknowledgements
// of the control connection for minutes behind the flood; the result
// travels the other way, and a datagram needs no acknowledgement.
func resultDatagram(session engine.SessionID, rep []byte) []byte {
	if engine.PacketHeaderLen+len(rep) > maxResultDatagram {
		return nil
	}
	b := make([]byte, engine.PacketHeaderLen+len(rep))
	engine.PacketHeader{Type: engine.PacketUDPData, Flags: FlagResult, Session: session}.Put(b)
	copy(b[engine.PacketHeaderLen:], rep)
	return b
}

// parseResultDatagram returns the JSON of a result datagram of session.
func parseResultDatagram(session engine.SessionID, b []byte) ([]byte, bool) {
	h, ok := engine.ParsePacketHeader(b)
	if !ok || h.Type != engine.PacketUDPData || h.Flags&FlagResult == 0 || h.Session != session {
		return nil, false
	}
	return b[engine.PacketHeaderLen:], true
}

// Packet is the fixed part of a udp probe datagram; padding follows it up to
// the configured size.
type Packet struct {
	Session engine.SessionID
	Flags   uint8
	Seq     uint64
	SentNs  int64 // send time, ns since the epoch on the sender's clock
}

// Put writes p into the first HeaderLen bytes of b.
func (p Packet) Put(b []byte) {
	engine.PacketHeader{Type: engine.PacketUDPData, Flags: p.Flags, Session: p.Session}.Put(b)
	putSeqTime(b, p.Seq, p.SentNs)
}

// putSeqTime writes the per-datagram fields into a datagram whose header is
// already in place.
func putSeqTime(b []byte, seq uint64, sentNs int64) {
	binary.BigEndian.PutUint64(b[12:20], seq)
	binary.BigEndian.PutUint64(b[20:28], uint64(sentNs))
}

// ParsePacket reads a udp probe datagram.
func ParsePacket(b []byte) (Packet, error) {
	h, ok := engine.ParsePacketHeader(b)
	if !ok {
		return Packet{}, fmt.Errorf("not a cnperf datagram (%d bytes)", len(b))
	}
	if h.Type != engine.PacketUDPData {
		return Packet{}, fmt.Errorf("datagram type %d is not udp probe data", h.Type)
	}
	if len(b) < HeaderLen {
		return Packet{}, fmt.Errorf("udp probe datagram of %d bytes, want at least %d", len(b), HeaderLen)
	}
	return Packet{Session: h.Session, Flags: h.Flags,
		Seq:    binary.BigEndian.Uint64(b[12:20]),
		SentNs: int64(binary.BigEndian.Uint64(b[20:28]))}, nil
}
