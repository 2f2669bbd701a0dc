// Package probetest starts cnperf responders for tests: on loopback, or in a
// network namespace made by package nettest. Each responder is closed in
// t.Cleanup.
package probetest

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Start serves hs on 127.0.0.1 at a free port and returns "127.0.0.1:PORT".
func Start(t testing.TB, hs ...engine.Handler) string {
	t.Helper()
	return StartAt(t, "127.0.0.1:0", hs...)
}

// StartAt serves hs on addr (port 0 picks a free port) and returns the
// bound address.
func StartAt(t testing.TB, addr string, hs ...engine.Handler) string {
	t.Helper()
	r := engine.NewResponder(testLogger(t), hs...)
	if err := r.Listen(context.Background(), addr); err != nil {
		t.Fatalf("start responder: %v", err)
	}
	return serve(t, r)
}

// StartIn serves hs in namespace ns on address a and returns "A:PORT"
// (bracketed for IPv6).
func StartIn(t testing.TB, ns *nettest.NS, a netip.Addr, hs ...engine.Handler) string {
	t.Helper()
	r := engine.NewResponder(testLogger(t), hs...)
	if err := ns.Do(func() error {
		return r.Listen(context.Background(), net.JoinHostPort(a.String(), "0"))
	}); err != nil {
		t.Fatalf("start responder in %s: %v", ns.Name, err)
	}
	return serve(t, r)
}

func serve(t testing.TB, r *engine.Responder) string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("responder: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("responder did not stop within 10s of Close: a session handler ignores its context")
		}
	})
	return r.Addr().String()
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}
