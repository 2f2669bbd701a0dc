package tcp

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

func tosPtr(v int) *int { return &v }

func dur(d time.Duration) probe.Duration { return probe.Duration(d) }

// checkResult asserts the figures of a finished test are positive and
// plausible.
func checkResult(t *testing.T, spec probe.Spec, res *probe.Result, intervals []probe.Interval) {
	t.Helper()
	streams := max(spec.Streams, 1)
	if res.Bytes == nil || res.ThroughputBps == nil || res.CPUPct == nil {
		t.Fatalf("missing figures: %+v", res)
	}
	if res.Bytes.Sender <= 0 || res.Bytes.Receiver <= 0 {
		t.Fatalf("bytes sender %v receiver %v: want > 0", res.Bytes.Sender, res.Bytes.Receiver)
	}
	if res.Bytes.Receiver > res.Bytes.Sender {
		t.Errorf("receiver read %v bytes, more than the %v the sender wrote", res.Bytes.Receiver, res.Bytes.Sender)
	}
	// Loopback and veth: every accepted byte arrives (the sender closes
	// cleanly and the receiver drains to EOF).
	if res.Bytes.Receiver != res.Bytes.Sender {
		t.Errorf("receiver read %v bytes, sender wrote %v: want equal on a clean path", res.Bytes.Receiver, res.Bytes.Sender)
	}
	if res.ThroughputBps.Receiver < 1e6 || res.ThroughputBps.Receiver > 1e12 {
		t.Errorf("receiver throughput %v bit/s: implausible", res.ThroughputBps.Receiver)
	}
	want := spec.Duration.D().Seconds()
	if res.DurationS < want*0.9 || res.DurationS > want+1 {
		t.Errorf("duration %v s, want about %v", res.DurationS, want)
	}
	if len(res.Streams) != streams {
		t.Errorf("%d stream results, want %d", len(res.Streams), streams)
	}
	for _, s := range res.Streams {
		if s.Bytes.Receiver <= 0 {
			t.Errorf("stream %d received nothing", s.ID)
		}
	}
	if res.Retransmits == nil || *res.Retransmits < 0 {
		t.Errorf("retransmits %v: want a measured count", res.Retransmits)
	}
	if res.SRTTms == nil || *res.SRTTms <= 0 || *res.SRTTms > 1000 {
		t.Errorf("srtt %v ms: implausible", res.SRTTms)
	}
	if res.CPUPct.Sender <= 0 || res.CPUPct.Receiver <= 0 {
		t.Errorf("cpu %+v: want both > 0", *res.CPUPct)
	}
	iv := spec.Interval.D()
	wantIv := int(spec.Duration.D() / iv)
	if len(res.Intervals) < wantIv || len(res.Intervals) > wantIv+1 {
		t.Errorf("%d intervals, want %d or %d", len(res.Intervals), wantIv, wantIv+1)
	}
	if len(intervals) != len(res.Intervals) {
		t.Errorf("OnInterval saw %d intervals, result has %d", len(intervals), len(res.Intervals))
	}
	// A loaded machine may starve a sender for a whole interval, so one
	// interval may hold nothing; the intervals together must hold data.
	var sum float64
	for i, v := range res.Intervals {
		sum += v.Bytes
		if v.EndS <= v.StartS || v.ThroughputBps < 0 || v.Bytes < 0 {
			t.Errorf("interval %d %+v: want positive length, no negative figure", i, v)
		}
		if i < wantIv && v.Retransmits == nil {
			t.Errorf("interval %d has no retransmit count", i)
		}
	}
	if sum <= 0 {
		t.Errorf("the intervals hold no bytes")
	}
	if sum > res.Bytes.Receiver {
		t.Errorf("intervals hold %v bytes, more than the %v received", sum, res.Bytes.Receiver)
	}
	if spec.TOS != nil {
		if res.DSCPReceived == nil {
			t.Errorf("dscp_received missing (notes %v)", res.Notes)
		} else if *res.DSCPReceived != *spec.TOS>>2 {
			t.Errorf("dscp_received %d, want %d", *res.DSCPReceived, *spec.TOS>>2)
		}
	}
}

func runWithIntervals(ctx context.Context, spec probe.Spec) (*probe.Result, []probe.Interval, error) {
	var mu sync.Mutex
	var seen []probe.Interval
	env := probe.Env{OnInterval: func(iv probe.Interval) {
		mu.Lock()
		seen = append(seen, iv)
		mu.Unlock()
	}}
	res, err := Prober{}.Run(ctx, spec, env)
	mu.Lock()
	defer mu.Unlock()
	return res, seen, err
}

func TestLoopback(t *testing.T) {
	addr := probetest.Start(t, Handler{})
	cases := []struct {
		name string
		spec probe.Spec
	}{
		{"forward", probe.Spec{}},
		{"reverse", probe.Spec{Reverse: true}},
		{"parallel-3", probe.Spec{Streams: 3}},
		{"reverse-parallel-2-ef", probe.Spec{Reverse: true, Streams: 2, TOS: tosPtr(46 << 2)}},
		{"ef", probe.Spec{TOS: tosPtr(46 << 2)}},
		{"rate-50M-window-mss", probe.Spec{RateBps: func() *uint64 { v := uint64(50e6); return &v }(), WindowBytes: 256 << 10, MSS: 1200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind, spec.Target = probe.KindTCP, addr
			spec.Duration, spec.Interval = dur(time.Second), dur(250*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, seen, err := runWithIntervals(ctx, spec)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			checkResult(t, spec, res, seen)
			if spec.RateBps != nil {
				// The limit holds on any machine; reaching it takes a
				// sender scheduled in time (a figure).
				r := res.ThroughputBps.Receiver
				if r <= 0 || r > 60e6 {
					t.Errorf("rate-limited to 50 Mbit/s, received %v bit/s; want some and at most the limit (60 for the windows' edges)", r)
				}
				figure.Check(t, r >= 35e6, "rate-limited to 50 Mbit/s, received %v bit/s, want at least 35 Mbit/s", r)
			}
		})
	}
}

func TestPair(t *testing.T) {
	p := nettest.NewPair(t)
	cases := []struct {
		name   string
		server netip.Addr
		spec   probe.Spec
	}{
		{"v4-ef", p.AddrB, probe.Spec{TOS: tosPtr(46 << 2)}},
		{"v6-ef", p.Addr6B, probe.Spec{TOS: tosPtr(46 << 2)}},
		{"v6-reverse-af41", p.Addr6B, probe.Spec{Reverse: true, TOS: tosPtr(34 << 2)}},
		{"v4-reverse-parallel-cs1", p.AddrB, probe.Spec{Reverse: true, Streams: 2, TOS: tosPtr(8 << 2)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.B.WaitAddr(t, tc.server)
			addr := probetest.StartIn(t, p.B, tc.server, Handler{})
			spec := tc.spec
			spec.Kind, spec.Target = probe.KindTCP, addr
			spec.Duration, spec.Interval = dur(time.Second), dur(500*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var res *probe.Result
			var seen []probe.Interval
			err := p.A.Do(func() (err error) {
				res, seen, err = runWithIntervals(ctx, spec)
				return err
			})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			checkResult(t, spec, res, seen)
		})
	}
}

func TestBadInput(t *testing.T) {
	addr := probetest.Start(t, Handler{})
	// A port nothing listens on: bind one, note it, close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	cases := []struct {
		name string
		spec probe.Spec
		want string
	}{
		{"negative duration", probe.Spec{Target: addr, Duration: dur(-time.Second)}, "must not be negative"},
		{"interval too small", probe.Spec{Target: addr, Interval: dur(50 * time.Millisecond)}, "at least 100ms"},
		{"too many streams", probe.Spec{Target: addr, Streams: 1000}, "streams 1000"},
		{"no port", probe.Spec{Target: "127.0.0.1"}, "HOST:PORT"},
		{"refused port", probe.Spec{Target: refused, Duration: dur(time.Second)}, "refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind = probe.KindTCP
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Prober{}.Run(ctx, spec, probe.Env{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if ctx.Err() != nil {
				t.Fatalf("took until the test's timeout: %v", err)
			}
		})
	}
}

func TestUnreachableHost(t *testing.T) {
	p := nettest.NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 198.19.0.0/16 is not routed in the pair: the kernel says so at once.
	spec := probe.Spec{Kind: probe.KindTCP, Target: "198.19.7.7:5201", Duration: dur(time.Second)}
	err := p.A.Do(func() error {
		_, err := Prober{}.Run(ctx, spec, probe.Env{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err %v, want network unreachable", err)
	}
}

// TestResponderKilled stops the responder mid-test: the client must fail
// with a clear error well before its bound.
func TestResponderKilled(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		name := map[bool]string{false: "forward", true: "reverse"}[reverse]
		t.Run(name, func(t *testing.T) {
			r := engine.NewResponder(nil, Handler{})
			if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			sctx, scancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Serve(sctx) }()
			defer func() {
				scancel()
				<-done
			}()
			spec := probe.Spec{Kind: probe.KindTCP, Target: r.Addr().String(), Duration: dur(5 * time.Second), Reverse: reverse}
			time.AfterFunc(700*time.Millisecond, scancel)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			start := time.Now()
			_, err := Prober{}.Run(ctx, spec, probe.Env{})
			if err == nil {
				t.Fatal("run succeeded although the responder was stopped mid-test")
			}
			if ctx.Err() != nil || time.Since(start) > 5*time.Second {
				t.Fatalf("took %v (err %v): want a prompt error", time.Since(start), err)
			}
			t.Logf("error after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

func TestMerger(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	var live []probe.Interval
	m := newMerger(func(iv probe.Interval) { live = append(live, iv) })
	m.add(sample{Index: 0, StartS: 0, EndS: 1, Bytes: i64(1000)})
	if len(live) != 0 {
		t.Fatalf("emitted interval 0 before the sender's half")
	}
	m.add(sample{Index: 0, Retrans: i64(2)})
	m.add(sample{Index: 1, Retrans: i64(3)})
	m.add(sample{Index: 2, Retrans: i64(0)}) // sender moved on: interval 1 comes once the receiver's half is in
	m.add(sample{Index: 1, StartS: 1, EndS: 2, Bytes: i64(500)})
	m.add(sample{Index: 3, StartS: 3, EndS: 3.5, Bytes: i64(100)}) // receiver's 2 never came
	out := m.flush()
	if len(live) != 3 || len(out) != 3 {
		t.Fatalf("live %d, out %d: want 3 each: %+v", len(live), len(out), out)
	}
	if out[0].ThroughputBps != 8000 || *out[0].Retransmits != 2 {
		t.Errorf("interval 0 = %+v", out[0])
	}
	if out[1].Bytes != 500 || *out[1].Retransmits != 3 {
		t.Errorf("interval 1 = %+v", out[1])
	}
	if out[2].StartS != 3 || out[2].ThroughputBps != 1600 || out[2].Retransmits != nil {
		t.Errorf("interval 3 = %+v", out[2])
	}
}

// TestCongestion: the sending sockets take the congestion control named
// (reno is built into every kernel), in either direction; one the kernel
// does not have fails the test naming TCP_CONGESTION, and a name that
// cannot be one is refused before anything is sent.
func TestCongestion(t *testing.T) {
	addr := probetest.Start(t, Handler{})
	cases := []struct {
		name       string
		congestion string
		reverse    bool
		want       string // "" succeeds
	}{
		{"reno forward", "reno", false, ""},
		{"reno reverse", "reno", true, ""},
		{"unknown forward", "nosuchcc", false, "TCP_CONGESTION"},
		{"unknown reverse", "nosuchcc", true, "nosuchcc"},
		{"not a name", "Cubic!", false, "congestion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			spec := probe.Spec{Kind: probe.KindTCP, Target: addr, Duration: dur(300 * time.Millisecond),
				Congestion: tc.congestion, Reverse: tc.reverse}
			res, err := Prober{}.Run(ctx, spec, probe.Env{})
			if tc.want == "" {
				if err != nil || res.Bytes == nil || res.Bytes.Receiver <= 0 {
					t.Fatalf("err %v, result %+v: want bytes received", err, res)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}
