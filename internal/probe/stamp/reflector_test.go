package stamp

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// testPacket builds a test packet with the given TLVs after the base.
func testPacket(auth bool, seq uint32, tlvs ...[]byte) []byte {
	b := make([]byte, BaseLenOf(auth))
	SenderPacket{Seq: seq, Timestamp: NTPTime(time.Now().UnixNano()), SSID: 9}.Put(b, auth)
	for _, t := range tlvs {
		b = append(b, t...)
	}
	return b
}

func tlv(flags, typ byte, val ...byte) []byte {
	b := []byte{flags, typ, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(len(val)))
	return append(b, val...)
}

func TestReflectorTLVs(t *testing.T) {
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	ef := CoS{DSCP1: 46}
	cosVal := make([]byte, 4)
	ef.Put(cosVal)
	cases := []struct {
		name    string
		pkt     []byte
		rxTOS   int
		wantTOS int
		check   func(t *testing.T, tlvs []TLV)
	}{
		{"cos answered", testPacket(false, 0, tlv(FlagU, TypeClassOfService, cosVal...)), 34<<2 | 1, 46 << 2, func(t *testing.T, tlvs []TLV) {
			c := ParseCoS(tlvs[0].Value)
			if tlvs[0].Flags != 0 || c.DSCP1 != 46 || c.DSCP2 != 34 || c.ECN != 1 || c.RP != 0 {
				t.Errorf("CoS answer: flags %#x %+v, want no flags, DSCP1 46, DSCP2 34, ECN 1", tlvs[0].Flags, c)
			}
		}},
		{"unknown type flagged U and copied", testPacket(false, 0, tlv(0, 200, 1, 2, 3)), 0, 0, func(t *testing.T, tlvs []TLV) {
			if tlvs[0].Flags != FlagU || !bytes.Equal(tlvs[0].Value, []byte{1, 2, 3}) {
				t.Errorf("unknown TLV: flags %#x value %v", tlvs[0].Flags, tlvs[0].Value)
			}
		}},
		{"malformed cos stops processing", testPacket(false, 0, tlv(FlagU, TypeClassOfService, 1, 2), tlv(FlagU, TypeTimestampInfo, 0, 0, 0, 0)), 0, 0, func(t *testing.T, tlvs []TLV) {
			if tlvs[0].Flags != FlagM {
				t.Errorf("short CoS: flags %#x, want M", tlvs[0].Flags)
			}
			if tlvs[1].Value[0] != 0 {
				t.Errorf("TLV after a malformed one was processed: %v", tlvs[1].Value)
			}
		}},
		{"timestamp information", testPacket(false, 0, tlv(FlagU, TypeTimestampInfo, 0, 0, 0, 0)), 0, 0, func(t *testing.T, tlvs []TLV) {
			v := tlvs[0].Value
			if tlvs[0].Flags != 0 || v[1] != StampSWLocal || v[3] != StampSWLocal || v[0] == 0 || v[2] == 0 {
				t.Errorf("timestamp information: flags %#x value %v", tlvs[0].Flags, v)
			}
		}},
		{"hmac tlv without a key", testPacket(false, 0, tlv(FlagU, TypeClassOfService, cosVal...), tlv(FlagU, TypeHMAC, make([]byte, 16)...)), 0, 0, func(t *testing.T, tlvs []TLV) {
			for _, x := range tlvs {
				if x.Flags != FlagI {
					t.Errorf("type %d: flags %#x, want I", x.Type, x.Flags)
				}
			}
		}},
	}
	r, err := NewReflector(ReflectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := make([]byte, maxPacket)
			n, tos, ok := r.answer(out, c.pkt, from, rxMeta{tos: c.rxTOS, tosOK: true, kernelNs: time.Now().UnixNano()})
			if !ok || n != len(c.pkt) {
				t.Fatalf("answer: ok %v, %d bytes for %d received (want symmetric)", ok, n, len(c.pkt))
			}
			if tos != c.wantTOS {
				t.Errorf("reply TOS %#x, want %#x", tos, c.wantTOS)
			}
			tlvs, _ := ParseTLVs(out[:n], BaseLen)
			c.check(t, tlvs)
		})
	}
}

func TestReflectorSequence(t *testing.T) {
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	for _, stateless := range []bool{false, true} {
		r, _ := NewReflector(ReflectorOptions{Stateless: stateless})
		out := make([]byte, maxPacket)
		var got []uint32
		for _, seq := range []uint32{0, 2, 5} { // 1, 3 and 4 lost on the way
			n, _, _ := r.answer(out, testPacket(false, seq), from, rxMeta{kernelNs: 1})
			rp, _ := ParseReflector(out[:n], false)
			if rp.SenderSeq != seq {
				t.Errorf("sender seq %d echoed as %d", seq, rp.SenderSeq)
			}
			got = append(got, rp.Seq)
		}
		want := []uint32{0, 1, 2}
		if stateless {
			want = []uint32{0, 2, 5}
		}
		if !equal(got, want) {
			t.Errorf("stateless=%v: reflector sequence %v, want %v", stateless, got, want)
		}
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReflectorAuthenticated(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	r, err := NewReflector(ReflectorOptions{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	pkt := make([]byte, MinSize(true)+10)
	buildTest(pkt, 4, time.Now().UnixNano(), 0, 9, 46, key)
	out := make([]byte, maxPacket)
	n, tos, ok := r.answer(out, pkt, from, rxMeta{tos: 46 << 2, tosOK: true, kernelNs: time.Now().UnixNano()})
	if !ok || tos != 46<<2 {
		t.Fatalf("answer: ok %v tos %#x", ok, tos)
	}
	if err := VerifyBase(out[:n], key); err != nil {
		t.Errorf("reflected base HMAC: %v", err)
	}
	var rep reply
	readTLVs(&rep, out[:n], AuthBaseLen, key)
	if rep.tlvIssue != "" || rep.cos == nil || rep.cos.DSCP2 != 46 {
		t.Errorf("reflected TLVs: issue %q, cos %+v", rep.tlvIssue, rep.cos)
	}
	// A packet signed with another key is dropped.
	buildTest(pkt, 5, time.Now().UnixNano(), 0, 9, 46, bytes.Repeat([]byte("x"), 32))
	if _, _, ok := r.answer(out, pkt, from, rxMeta{}); ok {
		t.Error("a packet with a wrong HMAC was answered")
	}
	if _, err := NewReflector(ReflectorOptions{Key: []byte("short")}); err == nil {
		t.Error("a 5-byte key was accepted")
	}
}

func TestReflectorStopsOnCancel(t *testing.T) {
	r, _ := NewReflector(ReflectorOptions{})
	if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return within 3s of cancellation")
	}
}
