package stamp

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBasePacketsRoundTrip(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(modeName(auth), func(t *testing.T) {
			b := make([]byte, BaseLenOf(auth))
			sp := SenderPacket{Seq: 7, Timestamp: 0x0102030405060708, ErrEst: 0x8001, SSID: 0xBEEF}
			sp.Put(b, auth)
			got, err := ParseSender(b, auth)
			if err != nil || got != sp {
				t.Fatalf("sender packet: got %+v, %v, want %+v", got, err, sp)
			}
			rp := ReflectorPacket{Seq: 3, Timestamp: 11, ErrEst: 0x0a10, SSID: 0xBEEF, RxTime: 10,
				SenderSeq: 7, SenderTime: 9, SenderErr: 0x8001, SenderTTL: 64}
			rp.Put(b, auth)
			gotR, err := ParseReflector(b, auth)
			if err != nil || gotR != rp {
				t.Fatalf("reflector packet: got %+v, %v, want %+v", gotR, err, rp)
			}
			if _, err := ParseSender(b[:len(b)-1], auth); err == nil {
				t.Error("a short packet parsed")
			}
		})
	}
}

// TestFieldOffsets pins the layouts of RFC 8762 §4.2 and §4.3 (and the
// SSID of RFC 8972 §3) byte by byte.
func TestFieldOffsets(t *testing.T) {
	b := make([]byte, BaseLen)
	ReflectorPacket{Seq: 0x01020304, SSID: 0x0a0b, SenderSeq: 0x11121314, SenderTTL: 0xff}.Put(b, false)
	want := map[int]byte{0: 1, 3: 4, 14: 0x0a, 15: 0x0b, 24: 0x11, 27: 0x14, 40: 0xff}
	for off, v := range want {
		if b[off] != v {
			t.Errorf("unauthenticated reflector packet: byte %d = %#x, want %#x", off, b[off], v)
		}
	}
	a := make([]byte, AuthBaseLen)
	ReflectorPacket{Seq: 0x01020304, SSID: 0x0a0b, SenderSeq: 0x11121314, SenderTTL: 0xff, Timestamp: 0x2100000000000022}.Put(a, true)
	want = map[int]byte{0: 1, 16: 0x21, 23: 0x22, 26: 0x0a, 27: 0x0b, 48: 0x11, 51: 0x14, 80: 0xff}
	for off, v := range want {
		if a[off] != v {
			t.Errorf("authenticated reflector packet: byte %d = %#x, want %#x", off, a[off], v)
		}
	}
}

func TestNTPTime(t *testing.T) {
	for _, ns := range []int64{0, 1_700_000_000_123_456_789, 2_085_978_496_000_000_001} {
		got := FromNTP(NTPTime(ns))
		if d := got - ns; d < -1 || d > 1 {
			t.Errorf("NTP round trip of %d: got %d (off by %d ns)", ns, got, d)
		}
	}
	// 1970-01-01 is 2208988800 s after the NTP epoch.
	if got := NTPTime(0) >> 32; got != 2208988800 {
		t.Errorf("NTP seconds of the Unix epoch = %d", got)
	}
	if got := FromPTP(5<<32 | 7); got != 5e9+7 {
		t.Errorf("PTP decode = %d", got)
	}
}

func TestErrorEstimate(t *testing.T) {
	cases := []struct {
		synced bool
		bound  time.Duration
	}{{true, 0}, {true, time.Microsecond}, {false, 16 * time.Second}, {true, 3 * time.Millisecond}, {false, 500 * time.Millisecond}}
	for _, c := range cases {
		e := NewErrorEstimate(c.synced, c.bound)
		if e.Synced() != c.synced || e.PTP() {
			t.Errorf("%v: flags S=%v Z=%v", c, e.Synced(), e.PTP())
		}
		if e&0xff == 0 {
			t.Errorf("%v: multiplier 0 (RFC 4656 forbids it)", c)
		}
		got := e.Bound()
		if got < c.bound || got > c.bound+c.bound/100+time.Microsecond {
			t.Errorf("%v: encodes %v, want at least %v and within 1 %%", c, got, c.bound)
		}
	}
	// RFC 4656: Multiplier × 2^(Scale−32) s. Scale 32, multiplier 1 is 1 s.
	if got := ErrorEstimate(32<<8 | 1).Bound(); got != time.Second {
		t.Errorf("scale 32 multiplier 1 = %v, want 1s", got)
	}
}

func TestHMAC(t *testing.T) {
	key := bytes.Repeat([]byte{0x42}, 16)
	b := make([]byte, AuthBaseLen)
	SenderPacket{Seq: 1, Timestamp: 2}.Put(b, true)
	SignBase(b, key)
	if err := VerifyBase(b, key); err != nil {
		t.Fatal(err)
	}
	// Known answer: HMAC-SHA-256 over the 96 octets, first 16 octets
	// (computed independently with Python's hmac and hashlib modules).
	if got := hex.EncodeToString(b[96:112]); got != knownHMAC {
		t.Errorf("HMAC = %s, want %s", got, knownHMAC)
	}
	b[5] ^= 1
	if VerifyBase(b, key) == nil {
		t.Error("a modified packet verified")
	}
	b[5] ^= 1
	if VerifyBase(b, bytes.Repeat([]byte{0x43}, 16)) == nil {
		t.Error("another key verified")
	}
}

const knownHMAC = "57e1d70a8bb78052a61c01cfaf47d5e2"

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	raw := []byte("a raw key of 24 bytes!!!")
	cases := []struct {
		name, content string
		want          []byte
		err           string
	}{
		{"hex with newline", "00112233445566778899aabbccddeeff\n", []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}, ""},
		{"raw bytes", string(raw), raw, ""},
		{"too short", "0011", nil, "at least 16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadKeyFile(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ReadKeyFile = %x, %v; want an error about %q", got, err, c.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, c.want) {
				t.Fatalf("ReadKeyFile = %x, %v; want %x", got, err, c.want)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
}
