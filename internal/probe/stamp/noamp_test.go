package stamp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestReflectorIsNoTrafficGenerator: the open reflector answers a test
// packet with exactly as many bytes as came in, answers nothing shorter
// than a base packet (a base-size answer would amplify), and never answers
// a reflector's answer (two reflectors would otherwise ping-pong forever
// after one spoofed packet).
func TestReflectorIsNoTrafficGenerator(t *testing.T) {
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	key := bytes.Repeat([]byte("k"), 32)
	reflected := func(auth bool) []byte { // another reflector's answer to a sender packet
		var k []byte
		if auth {
			k = key
		}
		other, _ := NewReflector(ReflectorOptions{Key: k})
		pkt := testPacket(auth, 7)
		if auth {
			SignBase(pkt, key)
		}
		out := make([]byte, maxPacket)
		n, _, ok := other.answer(out, pkt, from, rxMeta{kernelNs: time.Now().UnixNano()})
		if !ok {
			t.Fatal("a sender packet got no answer")
		}
		return out[:n]
	}
	padded := append(testPacket(false, 1), make([]byte, 956)...)
	for _, tt := range []struct {
		name   string
		auth   bool
		pkt    []byte
		answer bool
	}{
		{"base sender packet", false, testPacket(false, 1), true},
		{"padded to 1000 bytes", false, padded, true},
		{"1 byte", false, []byte{1}, false},
		{"14 bytes (unpadded TWAMP-Light)", false, testPacket(false, 1)[:14], false},
		{"43 bytes", false, testPacket(false, 1)[:43], false},
		{"a reflector's answer", false, reflected(false), false},
		{"a keyed reflector's answer, replayed", true, reflected(true), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var k []byte
			if tt.auth {
				k = key
			}
			r, _ := NewReflector(ReflectorOptions{Key: k})
			out := make([]byte, maxPacket)
			n, _, ok := r.answer(out, tt.pkt, from, rxMeta{kernelNs: 1})
			if ok != tt.answer {
				t.Fatalf("answered %v, want %v", ok, tt.answer)
			}
			if ok && n != len(tt.pkt) {
				t.Fatalf("answer of %d bytes to %d: want the same size", n, len(tt.pkt))
			}
		})
	}
}

// TestReflectorsDoNotLoop: on loopback, the answer of reflector A sent to
// reflector B from A's own address and port (as a spoofed packet would
// make them talk) gets no answer from B: the exchange ends after one
// reflection.
func TestReflectorsDoNotLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rs [2]*Reflector
	for i := range rs {
		r, _ := NewReflector(ReflectorOptions{})
		if err := r.Listen(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		go func() { _ = r.Serve(ctx) }()
		rs[i] = r
		defer r.Close()
	}
	// A sender's packet to A, whose answer we catch...
	c, err := net.DialUDP("udp", nil, rs[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(testPacket(false, 1)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, maxPacket)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("A did not answer a sender: %v", err)
	}
	// ...then handed to B as if A had sent it: B must not answer.
	b, err := net.DialUDP("udp", nil, rs[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Write(buf[:n]); err != nil {
		t.Fatal(err)
	}
	_ = b.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if m, err := b.Read(buf); err == nil {
		t.Fatalf("B answered a reflector's packet (%d bytes): two reflectors would loop", m)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if refl, dropped := rs[1].Counts(); refl == 0 && dropped == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("B: reflected %d dropped %d, want 0 and 1", refl, dropped)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
