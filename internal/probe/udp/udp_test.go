package udp

import (
	"context"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

func rate(bps uint64) *uint64 { return &bps }
func tos(v int) *int          { return &v }

func TestPacketRoundTrip(t *testing.T) {
	id := engine.NewSessionID()
	cases := []struct {
		name string
		p    Packet
	}{
		{"zero", Packet{Session: id}},
		{"hello", Packet{Session: id, Flags: FlagHello, Seq: 0, SentNs: 1}},
		{"big", Packet{Session: id, Seq: math.MaxUint64, SentNs: math.MaxInt64}},
		{"negative time", Packet{Session: id, Seq: 42, SentNs: -5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 100)
			tc.p.Put(b)
			got, err := ParsePacket(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.p {
				t.Fatalf("ParsePacket = %+v, want %+v", got, tc.p)
			}
		})
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", func() []byte { b := make([]byte, HeaderLen); Packet{Session: id}.Put(b); return b[:HeaderLen-1] }()},
		{"no magic", make([]byte, HeaderLen)},
		{"rr type", func() []byte {
			b := make([]byte, HeaderLen)
			engine.PacketHeader{Type: engine.PacketRRRequest, Session: id}.Put(b)
			return b
		}()},
	}
	for _, tc := range bad {
		t.Run("bad "+tc.name, func(t *testing.T) {
			if _, err := ParsePacket(tc.b); err == nil {
				t.Fatal("ParsePacket accepted a bad datagram")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		spec probe.Spec
		want string // substring of the error; "" = valid
	}{
		{"defaults", probe.Spec{Kind: "udp", Target: "127.0.0.1:1"}, ""},
		{"negative duration", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Duration: -1}, "duration"},
		{"size too small", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Size: HeaderLen - 1}, "size"},
		{"size minimum", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Size: HeaderLen}, ""},
		{"size too large", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Size: 65508}, "size"},
		{"size maximum", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Size: 65507}, ""},
		{"streams", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Streams: 2}, "streams"},
		{"short interval", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Interval: probe.Duration(time.Millisecond)}, "interval"},
		{"no port", probe.Spec{Kind: "udp", Target: "127.0.0.1"}, "target"},
		{"too many bins", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", HistBins: 1e6}, "bins"},
		{"bad tos", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", TOS: tos(300)}, "tos"},
		{"offload off", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Offload: "off"}, ""},
		{"bad offload", probe.Spec{Kind: "udp", Target: "127.0.0.1:1", Offload: "on"}, "offload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := New().Validate(tc.spec)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// check asserts what every successful run must satisfy.
func check(t *testing.T, res *probe.Result, spec probe.Spec) {
	t.Helper()
	p := res.Packets
	if p == nil || res.LossPct == nil || res.JitterMs == nil || res.PPS == nil || res.ThroughputBps == nil {
		t.Fatalf("result lacks udp figures: %+v", res)
	}
	if p.Sent <= 0 || p.Received <= 0 {
		t.Fatalf("packets %+v: nothing moved", *p)
	}
	if p.Lost != p.Sent-p.Received {
		t.Errorf("lost %d != sent %d - received %d", p.Lost, p.Sent, p.Received)
	}
	if res.LatencyMs == nil || res.Histogram == nil {
		t.Fatalf("no latency figures; notes %v", res.Notes)
	}
	var sum int64
	for _, c := range res.Histogram.Counts {
		sum += c
	}
	if sum != p.Received {
		t.Errorf("histogram counts sum to %d, want received %d", sum, p.Received)
	}
	w, n := histogram(spec)
	if len(res.Histogram.Counts) != n || math.Abs(res.Histogram.BinWidthUs-float64(w.Microseconds())) > 1e-9 {
		t.Errorf("histogram %d bins of %v µs, want %d of %v", len(res.Histogram.Counts), res.Histogram.BinWidthUs, n, w.Microseconds())
	}
	if res.LatencyMs.Min < 0 || res.LatencyMs.Max > 1000 || res.LatencyMs.Count != p.Received {
		t.Errorf("latency %+v implausible for %d datagrams on one host", *res.LatencyMs, p.Received)
	}
	if res.Clock == nil || !res.Clock.SameClock {
		t.Errorf("clock %+v: both ends run on this host", res.Clock)
	}
	if len(res.Intervals) == 0 {
		t.Errorf("no intervals")
	}
	var ivPackets int64
	for _, iv := range res.Intervals {
		ivPackets += *iv.Packets
	}
	if ivPackets != p.Received {
		t.Errorf("intervals hold %d datagrams, want received %d", ivPackets, p.Received)
	}
}

func run(t *testing.T, p *Prober, spec probe.Spec) *probe.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), spec.DurationOr(DefaultDuration)+20*time.Second)
	defer cancel()
	var ivs int
	res, err := p.Run(ctx, spec, probe.Env{OnInterval: func(probe.Interval) { ivs++ }})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ivs != len(res.Intervals) {
		t.Errorf("OnInterval called %d times for %d intervals", ivs, len(res.Intervals))
	}
	t.Logf("%s", probe.FormatSummary(res))
	return res
}

// TestLoopback runs the engine against a real responder on loopback.
func TestLoopback(t *testing.T) {
	v4 := probetest.Start(t, NewHandler())
	v6 := probetest.StartAt(t, "[::1]:0", &Handler{Opts: udpio.Options{NoOffload: true}})
	cases := []struct {
		name       string
		target     string
		prober     *Prober
		spec       probe.Spec
		wantDSCP   int
		paced      bool
		mode       string // in the notes
		send, recv string // send_mode, recv_mode
	}{
		{"low rate", v4, New(), probe.Spec{RateBps: rate(1_000_000), Duration: probe.Duration(2 * time.Second)}, 0, true, "sendmmsg with UDP GSO", "gso", "gro"},
		{"EF v4", v4, New(), probe.Spec{RateBps: rate(5_000_000), Duration: probe.Duration(time.Second), TOS: tos(46 << 2)}, 46, true, "", "gso", "gro"},
		{"TOS 0x10 v6", v6, New(), probe.Spec{RateBps: rate(5_000_000), Duration: probe.Duration(time.Second), TOS: tos(0x10)}, 4, true, "", "gso", "gro"},
		{"reverse EF v4", v4, New(), probe.Spec{RateBps: rate(20_000_000), Reverse: true, Duration: probe.Duration(time.Second), TOS: tos(46 << 2), Size: 1000}, 46, true, "recvmmsg with UDP GRO", "gso", "gro"},
		{"reverse TOS 0x10 v6", v6, New(), probe.Spec{RateBps: rate(20_000_000), Reverse: true, Duration: probe.Duration(time.Second), TOS: tos(0x10)}, 4, true, "sendmmsg, one datagram per entry", "mmsg", "gro"},
		{"no offload", v4, &Prober{Opts: udpio.Options{NoOffload: true}}, probe.Spec{RateBps: rate(20_000_000), Duration: probe.Duration(time.Second), Size: 200}, 0, true, "sendmmsg, one datagram per entry", "mmsg", "gro"},
		{"offload off", v4, New(), probe.Spec{Offload: probe.OffloadOff, RateBps: rate(100_000_000), Duration: probe.Duration(time.Second)}, 0, true, "sendmmsg, one datagram per entry", "mmsg", "gro"},
		{"reverse offload off", v4, New(), probe.Spec{Offload: probe.OffloadOff, Reverse: true, RateBps: rate(20_000_000), Duration: probe.Duration(time.Second)}, 0, true, "recvmmsg, one datagram per entry", "mmsg", "mmsg"},
		{"offload auto", v4, New(), probe.Spec{Offload: probe.OffloadAuto, RateBps: rate(20_000_000), Duration: probe.Duration(time.Second)}, 0, true, "", "gso", "gro"},
		{"no batching", v4, &Prober{Opts: udpio.Options{NoBatch: true}}, probe.Spec{RateBps: rate(20_000_000), Duration: probe.Duration(time.Second), HistBinWidth: probe.Duration(5 * time.Microsecond), HistBins: 50}, 0, true, "one datagram per system call", "plain", "gro"},
		{"reverse no batching", v4, &Prober{Opts: udpio.Options{NoBatch: true}}, probe.Spec{RateBps: rate(20_000_000), Reverse: true, Duration: probe.Duration(time.Second)}, 0, true, "receiver (client): one datagram per system call", "gso", "plain"},
		{"unpaced", v4, New(), probe.Spec{RateBps: rate(0), Duration: probe.Duration(500 * time.Millisecond), Interval: probe.Duration(100 * time.Millisecond)}, 0, false, "", "gso", "gro"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind, spec.Target = probe.KindUDP, tc.target
			res := run(t, tc.prober, spec)
			check(t, res, spec)
			if res.DSCPReceived == nil || *res.DSCPReceived != tc.wantDSCP || !*res.DSCPSurvived {
				t.Errorf("dscp on arrival %v, want %d", res.DSCPReceived, tc.wantDSCP)
			}
			if tc.mode != "" && !strings.Contains(strings.Join(res.Notes, "\n"), tc.mode) {
				t.Errorf("notes %q do not mention %q", res.Notes, tc.mode)
			}
			if res.SendMode != tc.send || res.RecvMode != tc.recv {
				t.Errorf("send_mode %q, recv_mode %q; want %q, %q", res.SendMode, res.RecvMode, tc.send, tc.recv)
			}
			if res.BurstDatagrams == nil || *res.BurstDatagrams < 1 {
				t.Fatalf("burst_datagrams %v, want at least 1", res.BurstDatagrams)
			}
			if tc.paced {
				// Loopback at these rates loses nothing; the schedule sets
				// the count: one datagram per gap, plus the first.
				want := spec.Duration.D().Seconds() * float64(*spec.RateBps) / float64(8*withDefaults(spec).Size)
				// A pacer never sends ahead of its schedule (10 % for the
				// run's edges), on any machine; a loaded one can hold the
				// sender back, so reaching the rate is a figure.
				got := float64(res.Packets.Sent)
				if got <= 0 || got > 1.1*want+2 {
					t.Errorf("sent %v datagrams, want some and at most %.0f + 10%%", got, want)
				}
				figure.Check(t, math.Abs(got-want) <= 0.1*want+2, "sent %v datagrams, want %.0f ± 10%%", got, want)
				rate := float64(*spec.RateBps)
				if tput := res.ThroughputBps.Sender; tput <= 0 || tput > 1.1*rate {
					t.Errorf("sender throughput %.0f bit/s, want some and at most %d + 10%%", tput, *spec.RateBps)
				}
				figure.Check(t, math.Abs(res.ThroughputBps.Sender-rate) <= 0.1*rate, "sender throughput %.0f bit/s, want %d ± 10%%", res.ThroughputBps.Sender, *spec.RateBps)
				if res.Packets.Duplicate != 0 {
					t.Errorf("packets %+v: duplicated on loopback", *res.Packets)
				}
				figure.Check(t, res.Packets.Lost == 0, "packets %+v: loopback at a low rate lost some", *res.Packets)
				// At most the datagrams due within one pacing quantum go
				// to the kernel at once.
				gap := float64(withDefaults(spec).Size*8) * 1e9 / float64(*spec.RateBps)
				if limit := max(1, int(float64(paceQuantum)/gap)); *res.BurstDatagrams > limit {
					t.Errorf("burst_datagrams %d, want at most %d (%v of the schedule)", *res.BurstDatagrams, limit, paceQuantum)
				}
			}
		})
	}
}

// TestAccounting makes the responder's receive path drop, duplicate and
// reorder datagrams by sequence number and checks the counts end to end.
func TestAccounting(t *testing.T) {
	var held []byte
	h := NewHandler()
	h.rxHook = func(pkt []byte, deliver func([]byte)) {
		p, err := ParsePacket(pkt)
		if err != nil {
			deliver(pkt)
			return
		}
		switch p.Seq % 10 {
		case 3: // lost
		case 5: // duplicated
			deliver(pkt)
			deliver(pkt)
		case 7: // held back, delivered after the next one
			held = append(held[:0], pkt...)
		case 8:
			deliver(pkt)
			if held != nil {
				deliver(held)
				held = nil
			}
		default:
			deliver(pkt)
		}
	}
	addr := probetest.Start(t, h)
	spec := probe.Spec{Kind: probe.KindUDP, Target: addr, RateBps: rate(2_000_000), Size: 200, Duration: probe.Duration(time.Second)}
	res := run(t, New(), spec)
	n := uint64(res.Packets.Sent)
	var lost, dup, ooo int64
	for s := uint64(0); s < n; s++ {
		switch s % 10 {
		case 3:
			lost++
		case 5:
			dup++
		case 7:
			if s+1 < n {
				ooo++
			} else {
				lost++ // its successor never came
			}
		}
	}
	want := probe.PacketCounts{Sent: int64(n), Received: int64(n) - lost, Lost: lost, OutOfOrder: ooo, Duplicate: dup}
	if *res.Packets != want {
		t.Fatalf("packets %+v, want %+v", *res.Packets, want)
	}
	if got, wantPct := *res.LossPct, 100*float64(lost)/float64(n); math.Abs(got-wantPct) > 1e-9 {
		t.Errorf("loss %.4f%%, want %.4f%%", got, wantPct)
	}
	var sum int64
	for _, c := range res.Histogram.Counts {
		sum += c
	}
	if sum != want.Received {
		t.Errorf("histogram holds %d, want %d", sum, want.Received)
	}
}

// TestAcrossNamespaces runs the engine over a veth between two namespaces,
// both directions, IPv4 and IPv6, with DSCP checked on arrival.
func TestAcrossNamespaces(t *testing.T) {
	pair := nettest.NewPair(t)
	pair.B.WaitAddr(t, pair.Addr6B)
	addr4 := probetest.StartIn(t, pair.B, pair.AddrB, NewHandler())
	addr6 := probetest.StartIn(t, pair.B, pair.Addr6B, NewHandler())
	cases := []struct {
		name     string
		target   string
		spec     probe.Spec
		wantDSCP int
	}{
		{"forward EF v4", addr4, probe.Spec{RateBps: rate(100_000_000), TOS: tos(46 << 2)}, 46},
		{"reverse EF v4", addr4, probe.Spec{RateBps: rate(100_000_000), TOS: tos(46 << 2), Reverse: true}, 46},
		{"forward TOS 0x10 v6", addr6, probe.Spec{RateBps: rate(100_000_000), TOS: tos(0x10)}, 4},
		{"reverse TOS 0x10 v6", addr6, probe.Spec{RateBps: rate(100_000_000), TOS: tos(0x10), Reverse: true}, 4},
		{"forward unpaced v4", addr4, probe.Spec{RateBps: rate(0)}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind, spec.Target, spec.Duration = probe.KindUDP, tc.target, probe.Duration(time.Second)
			// No t.Fatal inside NS.Do: run it there, judge it here.
			var res *probe.Result
			if err := pair.A.Do(func() (err error) {
				ctx, cancel := context.WithTimeout(context.Background(), spec.DurationOr(DefaultDuration)+20*time.Second)
				defer cancel()
				res, err = New().Run(ctx, spec, probe.Env{})
				return err
			}); err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s", probe.FormatSummary(res))
			check(t, res, spec)
			if res.DSCPReceived == nil || *res.DSCPReceived != tc.wantDSCP {
				t.Errorf("dscp on arrival %v, want %d", res.DSCPReceived, tc.wantDSCP)
			}
			if *spec.RateBps > 0 {
				figure.Check(t, res.Packets.Lost <= res.Packets.Sent/1000, "packets %+v: want at most 0.1%% lost at %d bit/s over a veth", *res.Packets, *spec.RateBps)
			}
		})
	}
}

// TestFailures checks that bad targets and a dying responder end the run
// quickly with an error that says what happened.
func TestFailures(t *testing.T) {
	closed := func() string { // a port nobody listens on (TCP and UDP)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := l.Addr().String()
		l.Close()
		return a
	}()
	cases := []struct {
		name   string
		spec   probe.Spec
		within time.Duration
		want   string
	}{
		{"refused port", probe.Spec{Target: closed}, 5 * time.Second, "refused"},
		{"negative duration", probe.Spec{Target: closed, Duration: -1}, time.Second, "negative"},
		{"size too small", probe.Spec{Target: closed, Size: 10}, time.Second, "size"},
		{"size too large", probe.Spec{Target: closed, Size: 70000}, time.Second, "size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind = probe.KindUDP
			ctx, cancel := context.WithTimeout(context.Background(), 2*tc.within)
			defer cancel()
			t0 := time.Now()
			_, err := New().Run(ctx, spec, probe.Env{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error about %q", err, tc.want)
			}
			if d := time.Since(t0); d > tc.within {
				t.Errorf("took %v, want under %v", d, tc.within)
			}
		})
	}
}

// TestUnreachable dials an address on the veth's subnet that nobody holds.
func TestUnreachable(t *testing.T) {
	pair := nettest.NewPair(t)
	spec := probe.Spec{Kind: probe.KindUDP, Target: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.77"), 9).String(),
		Timeout: probe.Duration(time.Second)}
	t0 := time.Now()
	err := pair.A.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := New().Run(ctx, spec, probe.Env{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "198.18.0.77") {
		t.Fatalf("Run = %v, want an error naming the target", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v with a 1s timeout", d)
	}
}

// TestResponderKilled closes the responder mid-test, both directions.
func TestResponderKilled(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		name := map[bool]string{false: "forward", true: "reverse"}[reverse]
		t.Run(name, func(t *testing.T) {
			r := engine.NewResponder(nil, NewHandler())
			if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- r.Serve(ctx) }()
			spec := probe.Spec{Kind: probe.KindUDP, Target: r.Addr().String(), RateBps: rate(10_000_000),
				Duration: probe.Duration(10 * time.Second), Reverse: reverse}
			time.AfterFunc(700*time.Millisecond, func() { cancel() })
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			t0 := time.Now()
			_, err := New().Run(rctx, spec, probe.Env{})
			if err == nil {
				t.Fatal("Run succeeded although the responder went away")
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("noticed after %v; want well under the 10s test", d)
			}
			t.Logf("error: %v", err)
			select {
			case <-served:
			case <-time.After(10 * time.Second):
				t.Error("responder did not stop")
			}
		})
	}
}
