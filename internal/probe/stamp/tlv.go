package stamp

import (
	"crypto/hmac"
	"encoding/binary"
)

// TLV is one STAMP TLV (RFC 8972 §4) inside a packet: Off is where its
// 4-byte header starts, Value aliases the packet.
type TLV struct {
	Off   int
	Flags uint8
	Type  uint8
	Value []byte
}

// Len is the TLV's size on the wire.
func (t TLV) Len() int { return tlvHdrLen + len(t.Value) }

// ParseTLVs walks the TLVs in b[base:]. It stops at the first TLV whose
// length overruns the packet and returns its offset as malformed (-1 when
// every TLV fits). A remainder too short for a header is malformed too.
func ParseTLVs(b []byte, base int) (tlvs []TLV, malformed int) {
	off := base
	for off < len(b) {
		if len(b)-off < tlvHdrLen {
			return tlvs, off
		}
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if off+tlvHdrLen+n > len(b) {
			return tlvs, off
		}
		tlvs = append(tlvs, TLV{Off: off, Flags: b[off], Type: b[off+1], Value: b[off+tlvHdrLen : off+tlvHdrLen+n]})
		off += tlvHdrLen + n
	}
	return tlvs, -1
}

// putTLV writes a TLV header and returns the value's slice.
func putTLV(b []byte, off int, flags, typ uint8, n int) []byte {
	b[off], b[off+1] = flags, typ
	binary.BigEndian.PutUint16(b[off+2:], uint16(n))
	v := b[off+tlvHdrLen : off+tlvHdrLen+n]
	clear(v)
	return v
}

// valueLen is the Length a recognised TLV must have (-1: any).
func valueLen(typ uint8) int {
	switch typ {
	case TypeTimestampInfo, TypeClassOfService:
		return 4
	case TypeHMAC:
		return HMACLen
	}
	return -1
}

// recognised says whether this implementation understands a TLV type.
func recognised(typ uint8) bool {
	switch typ {
	case TypeExtraPadding, TypeTimestampInfo, TypeClassOfService, TypeHMAC:
		return true
	}
	return false
}

// CoS is the Class of Service TLV's value (RFC 8972 §4.4, with erratum
// 8199: the reflector reports both the DSCP and the ECN it received).
type CoS struct {
	DSCP1 uint8 // the DSCP the sender asks the reflector to put on its reply
	DSCP2 uint8 // the DSCP the test packet arrived with at the reflector
	ECN   uint8 // the ECN the test packet arrived with
	RP    uint8 // reverse path: non-zero when the reflector did not use DSCP1
}

// ParseCoS reads a CoS value of 4 bytes.
func ParseCoS(v []byte) CoS {
	return CoS{DSCP1: v[0] >> 2, DSCP2: (v[0]&0x03)<<4 | v[1]>>4, ECN: v[1] >> 2 & 0x03, RP: v[1] & 0x03}
}

// Put writes c into a 4-byte value, the reserved octets zeroed.
func (c CoS) Put(v []byte) {
	v[0] = c.DSCP1<<2 | c.DSCP2>>4&0x03
	v[1] = (c.DSCP2&0x0f)<<4 | (c.ECN&0x03)<<2 | c.RP&0x03
	v[2], v[3] = 0, 0
}

// TimestampInfo is the Timestamp Information TLV's value (RFC 8972 §4.3).
type TimestampInfo struct {
	SyncIn, MethodIn, SyncOut, MethodOut uint8
}

// tlvMAC computes the HMAC TLV's value: over the base packet's Sequence
// Number field and every TLV before the HMAC TLV (RFC 8972 §4.8).
func tlvMAC(key, pkt []byte, base, hmacOff int) [HMACLen]byte {
	return mac(key, pkt[0:4], pkt[base:hmacOff])
}

// verifyTLVs checks the HMAC TLV of pkt: ok when it is present, in place
// (only Extra Padding may follow it) and verifies; when it is absent, ok
// only if no TLV needs it (none, or a lone Extra Padding TLV).
func verifyTLVs(key, pkt []byte, base int, tlvs []TLV) bool {
	at := -1
	for i, t := range tlvs {
		if t.Type == TypeHMAC {
			if at >= 0 {
				return false // a second HMAC TLV
			}
			at = i
		} else if at >= 0 && t.Type != TypeExtraPadding {
			return false // misplaced HMAC TLV
		}
	}
	if at < 0 {
		return len(tlvs) == 0 || len(tlvs) == 1 && tlvs[0].Type == TypeExtraPadding
	}
	h := tlvs[at]
	if len(h.Value) != HMACLen {
		return false
	}
	m := tlvMAC(key, pkt, base, h.Off)
	return hmac.Equal(m[:], h.Value)
}
