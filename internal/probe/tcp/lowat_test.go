package tcp

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLowWaterWant(t *testing.T) {
	tests := []struct {
		read int64 // bytes in the last lowatEvery
		want int
	}{
		{0, 1},
		{1, 1},
		{1000, 500},
		{100 << 10, 50 << 10},
		{1 << 30, lowatMax},
	}
	for _, tc := range tests {
		if got := want(tc.read); got != tc.want {
			t.Errorf("want(%d) = %d, want %d", tc.read, got, tc.want)
		}
	}
}

// TestLowWaterFollowsTheRate sets the mark on a real connection from the
// counts it is shown: up with a fast stream, left alone for a small
// change, back to 1 byte when the stream stops.
func TestLowWaterFollowsTheRate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var total int64
	w := newLowWater([]net.Conn{c}, func(int) int64 { return total })
	mark := func() int {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) }); err != nil || gerr != nil {
			t.Fatalf("getsockopt SO_RCVLOWAT: %v %v", err, gerr)
		}
		return v
	}
	steps := []struct {
		name  string
		read  int64
		want  int
		calls bool // whether the mark set changes
	}{
		{"fast stream", 1 << 20, lowatMax, true},
		{"a little slower (230 KB wanted): within a quarter, left alone", 460 << 10, lowatMax, false},
		{"ten times slower", 100 << 10, 50 << 10, true},
		{"stopped", 0, 1, true},
	}
	for _, st := range steps {
		total += st.read
		before := w.mark[0]
		w.look()
		if got := mark(); got != st.want {
			t.Fatalf("%s: SO_RCVLOWAT %d, want %d", st.name, got, st.want)
		}
		if changed := w.mark[0] != before; changed != st.calls {
			t.Fatalf("%s: mark changed %v, want %v", st.name, changed, st.calls)
		}
	}
}
