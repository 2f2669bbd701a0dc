package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// echo1 is the bounds of a one-stream echo test of the default duration.
var echo1 = probe.BoundsOf(probe.Spec{Kind: "echo"}, 0)

// serveKeyed runs on loopback, until t.Cleanup, an echo responder that
// requires keys derived from secret; limit, when not nil, sets it up
// further before it listens. It returns the responder and the context it
// serves under.
func serveKeyed(t *testing.T, secret []byte, limit func(*engine.Responder)) (*engine.Responder, context.Context) {
	t.Helper()
	r := engine.NewResponder(nil, echoHandler{})
	r.RequireKeys(probe.NewDerivedKeys(secret))
	if limit != nil {
		limit(r)
	}
	if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, ctx
}

// TestResponderRequiresKey: a keyed responder refuses a session without a
// valid key at the hello, with the reason on the client's side, and
// serves one with the key once.
func TestResponderRequiresKey(t *testing.T) {
	secret := probe.NewResponderSecret()
	r, ctx := serveKeyed(t, secret, nil)
	spec := probe.Spec{Kind: "echo", Target: r.Addr().String()}
	key := probe.DeriveTestKey(secret, "task-7", time.Now().Add(time.Minute), echo1)
	for _, c := range []struct {
		name, key, wantErr string
	}{
		{"no key", "", "serves only scheduled tests"},
		{"wrong key", probe.DeriveTestKey(probe.NewResponderSecret(), "task-7", time.Now().Add(time.Minute), echo1), "wrong MAC"},
		{"expired key", probe.DeriveTestKey(secret, "task-8", time.Now().Add(-time.Second), echo1), "expired"},
		{"the task's key", key, ""},
		{"the task's key again", key, "already used"},
	} {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := engine.DialWithKey(dctx, spec, engine.SockOpts{}, c.key)
		dcancel()
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
				continue
			}
			cl.Close()
			continue
		}
		if err == nil {
			cl.Close()
			t.Errorf("%s: served, want refused", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "refused the echo session") {
			t.Errorf("%s: err %q, want the refusal with %q", c.name, err, c.wantErr)
		}
	}
}

// TestResponderBoundsSession: a keyed responder refuses a hello that
// asks for more than its key's test, and ends an admitted session at its
// key's bound even when the client never stops.
func TestResponderBoundsSession(t *testing.T) {
	secret := probe.NewResponderSecret()
	r, ctx := serveKeyed(t, secret, nil)
	target := r.Addr().String()
	one := probe.BoundsOf(probe.Spec{Kind: "echo", Duration: probe.Duration(time.Second)}, 0)

	// The key of a 1 s, 1-stream test does not admit a 64-stream reverse one.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	key := probe.DeriveTestKey(secret, "task-big", time.Now().Add(time.Minute), one)
	cl, err := engine.DialWithKey(dctx, probe.Spec{Kind: "echo", Target: target, Streams: 64, Reverse: true, Duration: probe.Duration(time.Second)}, engine.SockOpts{}, key)
	if err == nil {
		cl.Close()
		t.Fatal("a 64-stream reverse session was admitted by the key of a 1-stream forward test")
	}
	if !strings.Contains(err.Error(), "asks for more than the test it was issued for") {
		t.Errorf("refusal %q does not say the session asks for more than its key's test", err)
	}

	// A session whose client never stops ends at the key's expiry (the
	// task's deadline), with the reason on the control connection.
	expires := time.Now().Add(2 * time.Second)
	key = probe.DeriveTestKey(secret, "task-held", expires, probe.BoundsOf(probe.Spec{Kind: "echo"}, 0))
	cl, err = engine.DialWithKey(dctx, probe.Spec{Kind: "echo", Target: target}, engine.SockOpts{}, key)
	if err != nil {
		t.Fatalf("the task's own session refused: %v", err)
	}
	defer cl.Close()
	if _, err := cl.Ctrl.Expect(dctx, engine.MsgReady); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Ctrl.RecvNoDeadline(dctx) // the client sends nothing more
	if err == nil || !strings.Contains(err.Error(), "bound of its test key") {
		t.Fatalf("held session: %v; want it ended at its key's bound", err)
	}
	// The key's expiry is in whole seconds, so the end is at most 2 s away;
	// 3 s more allow for a loaded machine.
	if late := time.Since(expires); late > 3*time.Second {
		t.Errorf("the session ended %v after its key's expiry", late)
	}
}
