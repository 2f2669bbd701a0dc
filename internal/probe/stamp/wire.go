package stamp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Wire sizes and offsets of RFC 8762 §4.2 and §4.3 (with the SSID of RFC
// 8972 §3 in what RFC 8762 left as MBZ).
const (
	// DefaultPort is the TWAMP-Test receiver port STAMP uses by default.
	DefaultPort = 862
	// BaseLen is the size of an unauthenticated test packet of either
	// direction; AuthBaseLen that of an authenticated one.
	BaseLen     = 44
	AuthBaseLen = 112
	// HMACLen is the truncated HMAC-SHA-256 of both modes and of the HMAC
	// TLV; authHMACOff is where the base packet's HMAC sits in
	// authenticated mode (it covers the 96 octets before it).
	HMACLen     = 16
	authHMACOff = 96
	// MinKeyLen is the shortest HMAC key accepted (stamp-suite's minimum
	// too; RFC 8762 leaves key management out of scope).
	MinKeyLen = 16
	tlvHdrLen = 4
)

// TLV types (RFC 8972 §4, IANA "STAMP TLV Types").
const (
	TypeExtraPadding   = 1
	TypeLocation       = 2
	TypeTimestampInfo  = 3
	TypeClassOfService = 4
	TypeHMAC           = 8
)

// TLV flags (RFC 8972 §4): Unrecognized, Malformed, Integrity failed.
const (
	FlagU = 0x80
	FlagM = 0x40
	FlagI = 0x20
)

// Synchronization sources and timestamping methods of the Timestamp
// Information TLV (RFC 8972 §4.3, IANA tables).
const (
	SyncNTP   = 1
	SyncPTP   = 2
	SyncLocal = 5 // local free-running clock

	StampHW      = 1 // hardware assisted
	StampSWLocal = 2 // software, local
)

// ntpEpochOffset is the number of seconds from 1900-01-01 (NTP's era 0)
// to 1970-01-01.
const ntpEpochOffset = 2208988800

// NTPTime encodes t in the 64-bit NTP format (32-bit seconds since 1900,
// 32-bit binary fraction), the default STAMP timestamp (Z = 0).
func NTPTime(ns int64) uint64 {
	sec := uint64(ns/1e9) + ntpEpochOffset
	frac := (uint64(ns%1e9) << 32) / 1e9
	return sec<<32 | frac
}

// FromNTP decodes a 64-bit NTP timestamp to ns since the Unix epoch. Era
// 0 ends in 2036; timestamps below 1968's seconds value are read as era 1
// (RFC 5905 §6 leaves the era to context; STAMP runs are short).
func FromNTP(v uint64) int64 {
	sec := int64(v >> 32)
	if sec < ntpEpochOffset {
		sec += 1 << 32 // era 1 (after 2036-02-07)
	}
	frac := int64((v & 0xffffffff) * 1e9 >> 32)
	return (sec-ntpEpochOffset)*1e9 + frac
}

// FromPTP decodes the truncated PTPv2 format (32-bit seconds since 1970,
// 32-bit nanoseconds), used when the Error Estimate's Z bit is 1.
func FromPTP(v uint64) int64 {
	return int64(v>>32)*1e9 + int64(v&0xffffffff)
}

// ErrorEstimate is the two-octet field of RFC 4656 §4.1.2 as STAMP uses it
// (RFC 8762 §4.2.1): S (clock synchronised to UTC by an external source), Z
// (timestamp format: 0 NTP, 1 PTP), and the error Multiplier × 2^(Scale−32)
// seconds.
type ErrorEstimate uint16

// NewErrorEstimate encodes an error bound, rounding up so the bound never
// shrinks; the multiplier is never zero (RFC 4656).
func NewErrorEstimate(synced bool, bound time.Duration) ErrorEstimate {
	secs := bound.Seconds()
	scale, mult := 0, 1.0
	for scale = 0; scale < 64; scale++ {
		mult = math.Ceil(secs / math.Ldexp(1, scale-32))
		if mult <= 255 {
			break
		}
	}
	if mult < 1 {
		mult = 1
	}
	if mult > 255 {
		mult = 255
	}
	e := ErrorEstimate(scale&0x3f)<<8 | ErrorEstimate(mult)
	if synced {
		e |= 0x8000
	}
	return e
}

// Synced reports the S bit.
func (e ErrorEstimate) Synced() bool { return e&0x8000 != 0 }

// PTP reports the Z bit: timestamps in the truncated PTP format.
func (e ErrorEstimate) PTP() bool { return e&0x4000 != 0 }

// Bound returns the error the field states.
func (e ErrorEstimate) Bound() time.Duration {
	scale := int(e>>8) & 0x3f
	mult := float64(e & 0xff)
	return time.Duration(math.Ldexp(mult, scale-32) * 1e9)
}

// Decode reads a timestamp written by the clock this estimate describes.
func (e ErrorEstimate) Decode(ts uint64) int64 {
	if e.PTP() {
		return FromPTP(ts)
	}
	return FromNTP(ts)
}

// SenderPacket is the Session-Sender's base test packet (RFC 8762 §4.2.1
// unauthenticated, §4.2.2 authenticated).
type SenderPacket struct {
	Seq       uint32
	Timestamp uint64
	ErrEst    ErrorEstimate
	SSID      uint16
}

// ReflectorPacket is the Session-Reflector's base test packet (RFC 8762
// §4.3.1, §4.3.2).
type ReflectorPacket struct {
	Seq        uint32 // the reflector's own (stateful) or the sender's (stateless)
	Timestamp  uint64 // T3, just before sending
	ErrEst     ErrorEstimate
	SSID       uint16
	RxTime     uint64 // T2, when the test packet arrived
	SenderSeq  uint32
	SenderTime uint64 // T1
	SenderErr  ErrorEstimate
	SenderTTL  uint8
}

// Field offsets: [unauthenticated, authenticated].
var (
	offSeq       = [2]int{0, 0}
	offTS        = [2]int{4, 16}
	offErr       = [2]int{12, 24}
	offSSID      = [2]int{14, 26}
	offRxTS      = [2]int{16, 32}
	offSenderSeq = [2]int{24, 48}
	offSenderTS  = [2]int{28, 64}
	offSenderErr = [2]int{36, 72}
	offSenderTTL = [2]int{40, 80}
	baseLens     = [2]int{BaseLen, AuthBaseLen}
	errShortPkt  = errors.New("shorter than a STAMP base packet")
	errBadHMAC   = errors.New("HMAC does not verify")
)

func mode(auth bool) int {
	if auth {
		return 1
	}
	return 0
}

// BaseLenOf returns the base packet size of a mode.
func BaseLenOf(auth bool) int { return baseLens[mode(auth)] }

// Put writes p into b (at least the base size, zeroed beyond the fields it
// sets by the caller) in the given mode. It does not write the HMAC.
func (p SenderPacket) Put(b []byte, auth bool) {
	m := mode(auth)
	clear(b[:baseLens[m]])
	binary.BigEndian.PutUint32(b[offSeq[m]:], p.Seq)
	binary.BigEndian.PutUint64(b[offTS[m]:], p.Timestamp)
	binary.BigEndian.PutUint16(b[offErr[m]:], uint16(p.ErrEst))
	binary.BigEndian.PutUint16(b[offSSID[m]:], p.SSID)
}

// ParseSender reads a sender's base packet.
func ParseSender(b []byte, auth bool) (SenderPacket, error) {
	m := mode(auth)
	if len(b) < baseLens[m] {
		return SenderPacket{}, fmt.Errorf("test packet of %d bytes: %w (%d)", len(b), errShortPkt, baseLens[m])
	}
	return parseBase(b, m), nil
}

// parseBase reads the fields a sender's and a reflector's packets share,
// from b of at least baseLens[m] bytes.
func parseBase(b []byte, m int) SenderPacket {
	return SenderPacket{
		Seq:       binary.BigEndian.Uint32(b[offSeq[m]:]),
		Timestamp: binary.BigEndian.Uint64(b[offTS[m]:]),
		ErrEst:    ErrorEstimate(binary.BigEndian.Uint16(b[offErr[m]:])),
		SSID:      binary.BigEndian.Uint16(b[offSSID[m]:]),
	}
}

// Put writes p into b in the given mode, MBZ fields zeroed. It does not
// write the HMAC.
func (p ReflectorPacket) Put(b []byte, auth bool) {
	SenderPacket{Seq: p.Seq, Timestamp: p.Timestamp, ErrEst: p.ErrEst, SSID: p.SSID}.Put(b, auth)
	m := mode(auth)
	binary.BigEndian.PutUint64(b[offRxTS[m]:], p.RxTime)
	binary.BigEndian.PutUint32(b[offSenderSeq[m]:], p.SenderSeq)
	binary.BigEndian.PutUint64(b[offSenderTS[m]:], p.SenderTime)
	binary.BigEndian.PutUint16(b[offSenderErr[m]:], uint16(p.SenderErr))
	b[offSenderTTL[m]] = p.SenderTTL
}

// IsReflected reports whether b (at least a base packet) is a reflector's
// answer rather than a sender's test packet: its Receive Timestamp field
// is set, where a sender's packet has MBZ octets (RFC 8762 §4.2.1,
// §4.2.2; every reflector stamps the time it received the test packet).
func IsReflected(b []byte, auth bool) bool {
	m := mode(auth)
	if len(b) < offRxTS[m]+8 {
		return false
	}
	return binary.BigEndian.Uint64(b[offRxTS[m]:]) != 0
}

// ParseReflector reads a reflector's base packet.
func ParseReflector(b []byte, auth bool) (ReflectorPacket, error) {
	m := mode(auth)
	if len(b) < baseLens[m] {
		return ReflectorPacket{}, fmt.Errorf("reflected packet of %d bytes: %w (%d)", len(b), errShortPkt, baseLens[m])
	}
	h := parseBase(b, m)
	return ReflectorPacket{
		Seq:        h.Seq,
		Timestamp:  h.Timestamp,
		ErrEst:     h.ErrEst,
		SSID:       h.SSID,
		RxTime:     binary.BigEndian.Uint64(b[offRxTS[m]:]),
		SenderSeq:  binary.BigEndian.Uint32(b[offSenderSeq[m]:]),
		SenderTime: binary.BigEndian.Uint64(b[offSenderTS[m]:]),
		SenderErr:  ErrorEstimate(binary.BigEndian.Uint16(b[offSenderErr[m]:])),
		SenderTTL:  b[offSenderTTL[m]],
	}, nil
}

// mac is HMAC-SHA-256 truncated to 16 octets over the concatenation of
// parts (RFC 8762 §4.4, RFC 8972 §4.8).
func mac(key []byte, parts ...[]byte) [HMACLen]byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	var out [HMACLen]byte
	copy(out[:], h.Sum(nil))
	return out
}

// SignBase writes the authenticated base packet's HMAC, over its first 96
// octets (RFC 8762 §4.4).
func SignBase(b []byte, key []byte) {
	m := mac(key, b[:authHMACOff])
	copy(b[authHMACOff:AuthBaseLen], m[:])
}

// VerifyBase checks the authenticated base packet's HMAC.
func VerifyBase(b []byte, key []byte) error {
	if len(b) < AuthBaseLen {
		return errShortPkt
	}
	m := mac(key, b[:authHMACOff])
	if !hmac.Equal(m[:], b[authHMACOff:AuthBaseLen]) {
		return errBadHMAC
	}
	return nil
}
