package connect

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

func dur(d time.Duration) probe.Duration { return probe.Duration(d) }

// TestSamplerSeesAListenerGo: connects succeed while the listener is
// open and are refused once it is closed; the timeline starts with an
// ok run and ends with a refused one.
func TestSamplerSeesAListenerGo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	closed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		closed <- time.Now()
		_ = ln.Close()
	}()
	spec := probe.Spec{Kind: probe.KindConnect, Target: ln.Addr().String(), Duration: dur(700 * time.Millisecond), Interval: dur(5 * time.Millisecond)}
	res, err := Prober{}.Run(context.Background(), spec, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	closedAt := <-closed
	tl := res.Connects
	if tl == nil || tl.Attempts < 10 {
		t.Fatalf("timeline %+v, want at least 10 attempts", tl)
	}
	if tl.Outcomes[probe.ConnectOK] == 0 || tl.Outcomes[probe.ConnectRefused] == 0 {
		t.Fatalf("outcomes %v, want some ok and some refused", tl.Outcomes)
	}
	if tl.Spans[0].Outcome != probe.ConnectOK || tl.Spans[len(tl.Spans)-1].Outcome != probe.ConnectRefused {
		t.Fatalf("spans %+v: want ok first, refused last", tl.Spans)
	}
	// When the change shows against the close is the machine's: an
	// attempt is timed right before its connect, which a busy machine may
	// delay.
	first, _ := tl.FirstAfter(tl.Spans[0].First, false)
	t.Logf("%d attempts, %v; the change %v after the close", tl.Attempts, tl.Outcomes, first.Sub(closedAt))
}

func TestTimelineFoldsRuns(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tl := Timeline([]time.Time{at(0), at(5), at(10), at(15), at(20)},
		[]string{probe.ConnectOK, probe.ConnectOK, probe.ConnectTimeout, probe.ConnectTimeout, probe.ConnectOK})
	if len(tl.Spans) != 3 || tl.Spans[1].First != at(10) || tl.Spans[1].Last != at(15) || tl.Spans[1].Attempts != 2 {
		t.Fatalf("spans %+v", tl.Spans)
	}
	if got, ok := tl.FirstAfter(at(7), false); !ok || got != at(10) {
		t.Errorf("first failure after 7 ms: %v %v, want 10 ms", got, ok)
	}
	if got, ok := tl.FirstAfter(at(12), true); !ok || got != at(20) {
		t.Errorf("first ok after 12 ms: %v %v, want 20 ms", got, ok)
	}
	if got := tl.LastBefore(at(12)); got != probe.ConnectTimeout {
		t.Errorf("last before 12 ms: %q", got)
	}
	if got := tl.LastBefore(at(0)); got != "" {
		t.Errorf("last before the first: %q, want none", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec probe.Spec
		ok   bool
	}{
		{"defaults", probe.Spec{Target: "10.0.0.1:80"}, true},
		{"no port", probe.Spec{Target: "10.0.0.1"}, false},
		{"interval too short", probe.Spec{Target: "10.0.0.1:80", Interval: dur(time.Microsecond)}, false},
		{"timeout past the SYN resend", probe.Spec{Target: "10.0.0.1:80", Timeout: dur(time.Second)}, false},
		{"too long", probe.Spec{Target: "10.0.0.1:80", Duration: dur(time.Hour)}, false},
		{"held", probe.Spec{Target: "10.0.0.1:80", Count: 20}, true},
		{"too many held", probe.Spec{Target: "10.0.0.1:80", Count: MaxHeld + 1}, false},
		{"held attempts too far apart", probe.Spec{Target: "10.0.0.1:80", Count: 20, Interval: dur(10 * time.Second)}, false},
	} {
		if err := (Prober{}).Validate(tc.spec); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// serve accepts on ln until it closes, handing each connection to keep.
func serve(t *testing.T, keep func(*net.TCPConn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			keep(c.(*net.TCPConn))
		}
	}()
	return ln
}

// TestHoldCountsOpenConnections: with Count set, a peer that keeps every
// connection has all of them held at once; a port nobody listens on
// refuses all and holds none; a peer that resets each connection as it
// accepts it holds none open once the attempts are over (the last one,
// accepted right as the attempts end, may still read as open; on
// loopback the reset may also beat the dial's return, an error).
func TestHoldCountsOpenConnections(t *testing.T) {
	var mu sync.Mutex
	var kept []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range kept {
			_ = c.Close()
		}
	})
	keeper := serve(t, func(c *net.TCPConn) { mu.Lock(); kept = append(kept, c); mu.Unlock() })
	resetter := serve(t, func(c *net.TCPConn) { _ = c.SetLinger(0); _ = c.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	for _, c := range []struct {
		name        string
		target      string
		interval    time.Duration
		ok          int
		heldAtMost  int
		heldAtLeast int
	}{
		{"kept", keeper.Addr().String(), 5 * time.Millisecond, 12, 12, 12},
		{"refused", closed.Addr().String(), 5 * time.Millisecond, 0, 0, 0},
		{"reset", resetter.Addr().String(), 200 * time.Millisecond, -1, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 12
			if c.name == "reset" {
				n = 4
			}
			spec := probe.Spec{Kind: probe.KindConnect, Target: c.target, Count: n, Interval: dur(c.interval)}
			res, err := Prober{}.Run(context.Background(), spec, probe.Env{})
			if err != nil {
				t.Fatal(err)
			}
			tl := res.Connects
			if tl.Attempts != n || c.ok >= 0 && tl.Outcomes[probe.ConnectOK] != c.ok || tl.Held == nil {
				t.Fatalf("%+v held %v; want %d attempts, %d ok", tl, tl.Held, n, c.ok)
			}
			if *tl.Held < c.heldAtLeast || *tl.Held > c.heldAtMost {
				t.Errorf("held %d, want %d to %d", *tl.Held, c.heldAtLeast, c.heldAtMost)
			}
			if c.ok == 0 && tl.Outcomes[probe.ConnectRefused] != n {
				t.Errorf("outcomes %v, want all refused", tl.Outcomes)
			}
		})
	}
}
