package engine_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// TestResponderBoundsUnadmitted: connections that never present an
// acceptable hello cost the responder a bounded read each and a bounded
// number of slots; past the caps a new connection is closed at once,
// unread; a client with a key is served beside the flood and after it.
func TestResponderBoundsUnadmitted(t *testing.T) {
	const total, perSource = 16, 8
	secret := probe.NewResponderSecret()
	r, ctx := serveKeyed(t, secret, func(r *engine.Responder) { r.LimitPending(total, perSource) })
	target := r.Addr().String()

	dialFrom := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatalf("connect from %s: %v", src, err)
		}
		return c
	}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	serveLegit := func(what, task string) {
		t.Helper()
		key := probe.DeriveTestKey(secret, task, time.Now().Add(time.Minute), echo1)
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		cl, err := engine.DialWithKey(dctx, probe.Spec{Kind: "echo", Target: target}, engine.SockOpts{}, key)
		if err != nil {
			t.Fatalf("%s: a client with a key was refused: %v", what, err)
		}
		cl.Close()
	}
	// waitPending polls the gate until n connections await admission.
	waitPending := func(n int) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); r.Pending().Pending != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%d connections await admission, want %d", r.Pending().Pending, n)
			}
		}
	}
	// closedAtOnce: the responder closes c without waiting for the hello
	// deadline (a silent connection would be read for seconds).
	closedAtOnce := func(what string, c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var b [1]byte
		_, err := c.Read(b[:])
		if errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
			t.Errorf("%s: still open 3 s later (err %v), want it closed at once", what, err)
		}
	}

	// An endless hello from each of perSource connections: each is closed
	// once the responder has read its bound, long before 4 MiB.
	var wg sync.WaitGroup
	written := make([]int, perSource)
	chunk := []byte(strings.Repeat("A", 32<<10))
	for i := range perSource {
		c := dialFrom("127.0.0.2")
		open = append(open, c)
		_ = c.(*net.TCPConn).SetWriteBuffer(8 << 10)
		wg.Go(func() {
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			n, err := c.Write([]byte(`CNPC{"type":"hello","kind":"echo","key":"`))
			for written[i] = n; err == nil && written[i] < 8<<20; written[i] += n {
				n, err = c.Write(chunk)
			}
		})
	}
	wg.Wait()
	for i, n := range written {
		if n >= 1<<20 {
			t.Errorf("hello flood connection %d: the responder took %d bytes of an unfinished hello (kernel buffers included), want far less than 1 MiB", i, n)
		}
	}
	t.Logf("bytes of an unfinished hello taken before the responder closed each connection: %v", written)
	waitPending(0)

	// Silent connections fill the per-source cap; one more from that
	// source is closed unread, while another source is still served.
	for range perSource {
		open = append(open, dialFrom("127.0.0.3"))
	}
	waitPending(perSource)
	closedAtOnce("a connection past the per-source cap", dialFrom("127.0.0.3"))
	serveLegit("beside a one-source flood", "task-1")

	// A second source fills the total; one more from anywhere is closed.
	for range total - perSource {
		open = append(open, dialFrom("127.0.0.4"))
	}
	waitPending(total)
	closedAtOnce("a connection past the total cap", dialFrom("127.0.0.5"))
	if st := r.Pending(); st.Peak > total || st.Refused < 2 {
		t.Errorf("gate %+v: want a peak of at most %d and at least 2 refused", st, total)
	}

	// The flood ends (or its connections time out): the gate empties and
	// a client is served again.
	for _, c := range open {
		c.Close()
	}
	open = nil
	waitPending(0)
	serveLegit("after the flood", "task-2")
}
