package engine_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// TestDialNamesAForeignPeer: a peer that answers the hello with something
// other than JSON fails the dial at once, naming what it is (a stock
// iperf3 server answers with one state byte after reading a 37-byte
// cookie), instead of waiting out the control timeout.
func TestDialNamesAForeignPeer(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer []byte
		want   string
	}{
		{"iperf3 PARAM_EXCHANGE", []byte{9}, "--peer iperf3"},
		{"iperf3 ACCESS_DENIED", []byte{0xff}, "--peer iperf3"},
		{"an HTTP server", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), "byte 0x48, not a JSON message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(conn, make([]byte, 37)); err != nil { // iperf3's cookie
					return
				}
				_, _ = conn.Write(c.answer)
				_, _ = io.Copy(io.Discard, conn)
			}()
			spec := probe.Spec{Kind: probe.KindTCP, Target: ln.Addr().String(), Timeout: probe.Duration(5 * time.Second)}
			start := time.Now()
			_, err = engine.Dial(context.Background(), spec, engine.SockOpts{})
			if !errors.Is(err, engine.ErrNotCnperf) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("dial: %v; want ErrNotCnperf containing %q", err, c.want)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the dial took %v: it waited for the timeout instead of failing at the first byte", took)
			}
		})
	}
}
