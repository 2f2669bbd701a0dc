package rr

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

func tos(v int) *int                     { return &v }
func rate(v uint64) *uint64              { return &v }
func dur(d time.Duration) probe.Duration { return probe.Duration(d) }

func TestValidate(t *testing.T) {
	base := probe.Spec{Kind: probe.KindRR, Target: "127.0.0.1:5201"}
	cases := []struct {
		name string
		edit func(*probe.Spec)
		want string // substring of the error; "" = valid
	}{
		{"defaults", func(*probe.Spec) {}, ""},
		{"udp", func(s *probe.Spec) { s.Proto = ProtoUDP }, ""},
		{"crr", func(s *probe.Spec) { s.Proto = ProtoCRR }, ""},
		{"unknown proto", func(s *probe.Spec) { s.Proto = "sctp" }, `proto "sctp"`},
		{"rate 0", func(s *probe.Spec) { s.RateBps = rate(0) }, "rate 0"},
		{"rate", func(s *probe.Spec) { s.RateBps = rate(1e6) }, "does not pace"},
		{"negative duration", func(s *probe.Spec) { s.Duration = -1 }, "negative"},
		{"negative count", func(s *probe.Spec) { s.Count = -3 }, "count"},
		{"negative timeout", func(s *probe.Spec) { s.Timeout = dur(-time.Second) }, "timeout"},
		{"size too small", func(s *probe.Spec) { s.Size = MinSize - 1 }, "size"},
		{"udp size too large", func(s *probe.Spec) { s.Proto, s.Size = ProtoUDP, MaxSizeUDP+1 }, "size"},
		{"reverse", func(s *probe.Spec) { s.Reverse = true }, "reverse"},
		{"streams", func(s *probe.Spec) { s.Streams = 2 }, "streams"},
		{"no port", func(s *probe.Spec) { s.Target = "127.0.0.1" }, "target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.edit(&s)
			err := Prober{}.Validate(s)
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

// run runs one rr probe bounded by a deadline and logs its summary.
func run(t *testing.T, spec probe.Spec) *probe.Result {
	t.Helper()
	res, err := runErr(spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%s", probe.FormatSummary(res))
	return res
}

// runErr is run without the testing.T, for use inside nettest's NS.Do
// (where t.Fatal must not be called).
func runErr(spec probe.Spec) (*probe.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if spec.Timeout == 0 {
		// A loaded test machine can stall a responder for a while; a
		// request is only lost after this long.
		spec.Timeout = dur(5 * time.Second)
	}
	d0 := softnetDrops()
	res, err := Prober{}.Run(ctx, spec, probe.Env{})
	if res != nil {
		backlogDrops.Store(res, softnetDrops()-d0)
	}
	return res, err
}

// backlogDrops holds, per result, the packets the kernel dropped from its
// per-CPU input backlogs (any namespace, any test) while it was measured.
// go test runs packages side by side, and the udp package's tests flood
// loopback at Gbit/s: a datagram of an rr test can then be dropped before
// any socket sees it. Such a loss is the machine's, not the probe's.
var backlogDrops sync.Map // *probe.Result → uint64

// softnetDrops sums /proc/net/softnet_stat's second column (packets
// dropped because a CPU's input backlog was full); 0 when unreadable.
func softnetDrops() uint64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return 0
	}
	var sum uint64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			if v, err := strconv.ParseUint(f[1], 16, 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// runIn runs spec from inside ns.
func runIn(t *testing.T, ns *nettest.NS, spec probe.Spec) *probe.Result {
	t.Helper()
	var res *probe.Result
	if err := ns.Do(func() (err error) { res, err = runErr(spec); return err }); err != nil {
		t.Fatalf("Run in %s: %v", ns.Name, err)
	}
	t.Logf("%s", probe.FormatSummary(res))
	return res
}

// check asserts what every clean run of count transactions must show.
func check(t *testing.T, res *probe.Result, spec probe.Spec, wantDSCP int) {
	t.Helper()
	if res.Kind != probe.KindRR || res.Src == "" || res.Dst == "" || res.StartedAt.IsZero() || res.DurationS <= 0 {
		t.Errorf("common fields: kind %q src %q dst %q started %v duration %v", res.Kind, res.Src, res.Dst, res.StartedAt, res.DurationS)
	}
	if res.RTTms == nil || res.AppRTTms == nil || res.TransactionsPerS == nil || res.LossPct == nil {
		t.Fatalf("missing rr figures: %+v", res)
	}
	n := int64(spec.Count)
	// UDP transactions lost while the kernel dropped at least as many
	// packets from its input backlogs are not asserted (backlogDrops).
	if lost := n - res.AppRTTms.Count; spec.Proto == ProtoUDP && lost > 0 {
		if v, ok := backlogDrops.Load(res); ok && v.(uint64) >= uint64(lost) {
			t.Logf("%d of %d UDP transactions lost while the kernel dropped %d packets from its input backlogs (tests flooding loopback beside this one): not the probe's loss", lost, n, v.(uint64))
			n -= lost
		}
	}
	for name, s := range map[string]*probe.Summary{"rtt_ms": res.RTTms, "app_rtt_ms": res.AppRTTms} {
		if s.Count != n {
			t.Errorf("%s counts %d transactions, want %d", name, s.Count, n)
		}
		if s.Min < 0 || s.Min > s.P50 || s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.P999 || s.P999 > s.Max {
			t.Errorf("%s %+v: not ordered min ≤ p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max", name, *s)
		}
		if s.Avg < s.Min || s.Avg > s.Max || s.Stdev < 0 {
			t.Errorf("%s %+v: avg or stdev out of range", name, *s)
		}
		if s.P50 <= 0 || s.Max > 1000 {
			t.Errorf("%s %+v: implausible for a local path", name, *s)
		}
	}
	// Per transaction the network's RTT is the application's less the
	// responder's dwell and the client's wake-up, so never larger (HDR
	// percentiles carry 0.1 % error).
	// The trimmed mean keeps the lowest 95 %: between the minimum and the
	// mean of all (0.1 % for the histogram).
	if tm := res.RTTTrimmedMs; tm == nil || *tm < res.RTTms.Min*0.999 || *tm > res.RTTms.Avg*1.001 {
		t.Errorf("rtt_trimmed_mean_ms %v: want within [min %v, avg %v]", tm, res.RTTms.Min, res.RTTms.Avg)
	}
	if res.RTTms.P50 > res.AppRTTms.P50*1.002 || res.RTTms.Min > res.AppRTTms.Min*1.002 {
		t.Errorf("rtt_ms %+v exceeds app_rtt_ms %+v", *res.RTTms, *res.AppRTTms)
	}
	// Both ends did work, so both spent CPU; neither can exceed the
	// machine's CPUs.
	if c := res.CPUPct; c == nil || c.Sender <= 0 || c.Receiver <= 0 || c.Sender > 100*float64(runtime.NumCPU()) || c.Receiver > 100*float64(runtime.NumCPU()) {
		t.Errorf("cpu_pct %+v: want both ends in (0, %d]", c, 100*runtime.NumCPU())
	}
	if *res.LossPct != 0 && n == int64(spec.Count) {
		t.Errorf("loss %v%% on a clean local path", *res.LossPct)
	}
	if want := float64(n) / res.DurationS; *res.TransactionsPerS < want*0.99 || *res.TransactionsPerS > want*1.01 {
		t.Errorf("transactions_per_s %v, want %d over %v s = %v", *res.TransactionsPerS, n, res.DurationS, want)
	}
	if res.DSCPReceived == nil || *res.DSCPReceived != wantDSCP || res.DSCPSurvived == nil || !*res.DSCPSurvived {
		t.Errorf("dscp_received %v survived %v, want %d (notes %q)", res.DSCPReceived, res.DSCPSurvived, wantDSCP, res.Notes)
	}
	for _, note := range res.Notes {
		if strings.Contains(note, "its shared UDP socket") {
			t.Errorf("the session had no UDP socket of its own: %s", note)
		}
		if strings.Contains(note, "no kernel receive timestamp") {
			t.Errorf("kernel timestamps missing: %s", note)
		}
	}
}

var protos = []string{ProtoUDP, ProtoTCP, ProtoCRR}

// TestLoopback runs TCP_RR, UDP_RR and TCP_CRR against a real responder on
// IPv4 and IPv6 loopback, marked, with the source address bound.
func TestLoopback(t *testing.T) {
	v4 := probetest.Start(t, Handler{})
	v6 := probetest.StartAt(t, "[::1]:0", Handler{})
	for _, p := range protos {
		for _, fam := range []struct {
			name, target, source string
			tos, dscp            int
		}{{"v4 EF", v4, "127.0.0.1", 46 << 2, 46}, {"v6 TOS 0x10", v6, "::1", 0x10, 4}} {
			t.Run(p+" "+fam.name, func(t *testing.T) {
				spec := probe.Spec{Kind: probe.KindRR, Target: fam.target, Source: fam.source, Proto: p, Count: 300, TOS: tos(fam.tos)}
				res := run(t, spec)
				check(t, res, spec, fam.dscp)
				host, _, _ := net.SplitHostPort(res.Src)
				if host != fam.source {
					t.Errorf("src %q, want bound to %s", res.Src, fam.source)
				}
			})
		}
	}
}

// TestDwellSubtracted makes the responder hold every answer 3 ms: the
// application waits for it, the network's RTT must not contain it.
func TestDwellSubtracted(t *testing.T) {
	const delay = 3 * time.Millisecond
	addr := probetest.Start(t, Handler{delay: delay})
	for _, p := range protos {
		t.Run(p, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Count: 20}
			res := run(t, spec)
			check(t, res, spec, 0)
			if res.AppRTTms.Min < float64(delay.Milliseconds()) {
				t.Errorf("app_rtt_ms min %v: the responder held each answer %v", res.AppRTTms.Min, delay)
			}
			// Loopback's own round trip is tens of µs; 1 ms leaves room
			// for a loaded machine while excluding the 3 ms dwell.
			if res.RTTms.P50 >= 1 {
				t.Errorf("rtt_ms p50 %v ms: the responder's %v dwell was not subtracted", res.RTTms.P50, delay)
			}
		})
	}
}

// TestTCPResponseLate makes the responder hold its answer past the
// client's timeout. The long TCP connection's reads carry no receive
// timeout (the stall watch bounds them), crr's do: both must fail naming
// the timeout, within it and the watch's period, not wait for the answer.
func TestTCPResponseLate(t *testing.T) {
	const timeout = 400 * time.Millisecond
	addr := probetest.Start(t, Handler{delay: 3 * time.Second})
	for _, p := range []string{ProtoTCP, ProtoCRR} {
		t.Run(p, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t0 := time.Now()
			_, err := Prober{}.Run(ctx, probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Count: 3, Timeout: dur(timeout)}, probe.Env{})
			took := time.Since(t0)
			if err == nil || !strings.Contains(err.Error(), "no response to request 0 within "+timeout.String()) {
				t.Fatalf("Run = %v, want no response to request 0 within %v", err, timeout)
			}
			if limit := timeout + watchPeriod(timeout) + time.Second; took > limit {
				t.Errorf("failed after %v, want under %v", took, limit)
			}
		})
	}
}

// TestAcrossNamespaces runs each transport over a veth between two
// namespaces, IPv4 and IPv6, with the mark checked on arrival.
func TestAcrossNamespaces(t *testing.T) {
	pair := nettest.NewPair(t)
	pair.B.WaitAddr(t, pair.Addr6B)
	addr4 := probetest.StartIn(t, pair.B, pair.AddrB, Handler{})
	addr6 := probetest.StartIn(t, pair.B, pair.Addr6B, Handler{})
	for _, p := range protos {
		for _, fam := range []struct {
			name, target string
			tos, dscp    int
		}{{"v4 EF", addr4, 46 << 2, 46}, {"v6 AF41", addr6, 34 << 2, 34}} {
			t.Run(p+" "+fam.name, func(t *testing.T) {
				spec := probe.Spec{Kind: probe.KindRR, Target: fam.target, Proto: p, Count: 200, TOS: tos(fam.tos)}
				res := runIn(t, pair.A, spec)
				check(t, res, spec, fam.dscp)
				figure.Check(t, res.RTTms.P50 <= 5, "rtt_ms p50 %v ms over a veth, want at most 5", res.RTTms.P50)
			})
		}
	}
}

// spy wraps the handler and records the client address the responder saw.
type spy struct {
	Handler
	mu   sync.Mutex // guards seen
	seen []string
}

func (s *spy) Serve(ctx context.Context, sess *engine.Session) error {
	s.mu.Lock()
	s.seen = append(s.seen, sess.Remote.String())
	s.mu.Unlock()
	return s.Handler.Serve(ctx, sess)
}

// TestBehindNAT source-NATs the client's namespace to an address the client
// does not have (198.18.9.9, routed back through the client's namespace):
// the responder sees only the translated address and must still answer
// every transport.
func TestBehindNAT(t *testing.T) {
	pair := nettest.NewPair(t)
	ipt, err := exec.LookPath("iptables")
	if err != nil {
		t.Skip("skipping: iptables not installed")
	}
	const natAddr = "198.18.9.9"
	ictx, icancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer icancel()
	nat := exec.CommandContext(ictx, ipt, "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-o", "eth0", "-j", "SNAT", "--to-source", natAddr)
	var out strings.Builder
	nat.Stdout, nat.Stderr = &out, &out
	if err := pair.A.Start(nat); err != nil {
		t.Fatal(err)
	}
	if err := nat.Wait(); err != nil {
		t.Skipf("skipping: cannot add a SNAT rule here: %v: %s", err, out.String())
	}
	if err := pair.B.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("198.18.9.0/24")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Gw: pair.AddrA.AsSlice()})
	}); err != nil {
		t.Fatalf("route back to the NAT address: %v", err)
	}
	h := &spy{}
	addr := probetest.StartIn(t, pair.B, pair.AddrB, h)
	for _, p := range protos {
		t.Run(p, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Count: 100, TOS: tos(46 << 2)}
			res := runIn(t, pair.A, spec)
			check(t, res, spec, 46)
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) != len(protos) {
		t.Fatalf("responder saw %d sessions, want %d", len(h.seen), len(protos))
	}
	for _, s := range h.seen {
		if ap, err := netip.ParseAddrPort(s); err != nil || ap.Addr().String() != natAddr {
			t.Errorf("responder saw the client as %s, want the NAT address %s", s, natAddr)
		}
	}
}

// TestFailures: refused port, unreachable host, bad input: a clear error,
// and quickly.
func TestFailures(t *testing.T) {
	closed := func() string {
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
		{"refused port", probe.Spec{Target: closed, Proto: ProtoUDP}, 5 * time.Second, "refused"},
		{"rate 0", probe.Spec{Target: closed, RateBps: rate(0)}, time.Second, "rate 0"},
		{"negative duration", probe.Spec{Target: closed, Duration: -1}, time.Second, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind = probe.KindRR
			ctx, cancel := context.WithTimeout(context.Background(), 2*tc.within)
			defer cancel()
			t0 := time.Now()
			_, err := Prober{}.Run(ctx, spec, probe.Env{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error about %q", err, tc.want)
			}
			if d := time.Since(t0); d > tc.within {
				t.Errorf("took %v, want under %v", d, tc.within)
			}
		})
	}
	t.Run("unreachable host", func(t *testing.T) {
		nettest.Require(t)
		ns, err := nettest.NewNS(nettest.Prefix + "p-rr-unreach")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nettest.Delete(ns) })
		t0 := time.Now()
		err = ns.Do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Prober{}.Run(ctx, probe.Spec{Kind: probe.KindRR, Target: "198.18.0.77:5201", Timeout: dur(time.Second)}, probe.Env{})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("Run = %v, want network unreachable", err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

// TestResponderKilled stops the responder mid-test: every transport must
// fail with an error well before the 10 s test would end.
func TestResponderKilled(t *testing.T) {
	for _, p := range protos {
		t.Run(p, func(t *testing.T) {
			r := engine.NewResponder(nil, Handler{})
			if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- r.Serve(ctx) }()
			time.AfterFunc(500*time.Millisecond, cancel)
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			t0 := time.Now()
			_, err := Prober{}.Run(rctx, probe.Spec{Kind: probe.KindRR, Target: r.Addr().String(), Proto: p, Duration: dur(10 * time.Second)}, probe.Env{})
			if err == nil {
				t.Fatal("Run succeeded although the responder went away")
			}
			t.Logf("error: %v", err)
			if d := time.Since(t0); d > 7*time.Second {
				t.Errorf("noticed after %v; want well under the 10s test", d)
			}
			select {
			case <-served:
			case <-time.After(10 * time.Second):
				t.Error("responder did not stop")
			}
		})
	}
}

// TestInterval spaces transactions like ping: 20 at 5 ms take about 95 ms.
func TestInterval(t *testing.T) {
	addr := probetest.Start(t, Handler{})
	for _, p := range []string{ProtoUDP, ProtoTCP} {
		t.Run(p, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Count: 20, Interval: dur(5 * time.Millisecond)}
			res := run(t, spec)
			check(t, res, spec, 0)
			// Never sooner than the spacing allows; how much later is the
			// machine's scheduling (a figure).
			if res.DurationS < 0.095 {
				t.Errorf("20 transactions 5 ms apart took %v s, want at least 0.095", res.DurationS)
			}
			figure.Check(t, res.DurationS <= 0.6, "20 transactions 5 ms apart took %v s, want about 0.095 (at most 0.6)", res.DurationS)
		})
	}
}

// TestIntervalSkipsOverrunSlots: answers held 12 ms, transactions 10 ms
// apart: each overruns its slot, and the next waits for the slot after
// (20 ms apart) instead of starting at once to catch up (12 ms apart), so
// a slow spell is not followed by a crowd of quick ones.
func TestIntervalSkipsOverrunSlots(t *testing.T) {
	addr := probetest.Start(t, Handler{delay: 12 * time.Millisecond})
	for _, p := range []string{ProtoUDP, ProtoTCP} {
		t.Run(p, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Count: 10, Interval: dur(10 * time.Millisecond)}
			res := run(t, spec)
			// Slots 0, 20, ..., 180 ms and the last answer's 12 ms: at
			// least 0.19 s; catching up would take about 0.12 s.
			if res.DurationS < 0.19 {
				t.Errorf("10 transactions of 12 ms, 10 ms apart, took %v s; want at least 0.19 (overrun slots skipped)", res.DurationS)
			}
		})
	}
}

// TestConcurrentUDPSessions runs several UDP rr sessions against one
// responder at once: each gets a socket of its own on the responder's port,
// which takes over answering its transactions, and none loses or mixes up
// another's datagrams while the others' sockets are opened and closed.
func TestConcurrentUDPSessions(t *testing.T) {
	var mu sync.Mutex
	var ends []endResult
	addr := probetest.Start(t, Handler{onEnd: func(e endResult) {
		mu.Lock()
		ends = append(ends, e)
		mu.Unlock()
	}})
	const sessions = 3
	var wg sync.WaitGroup
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: ProtoUDP, Count: 2000 + 500*i, TOS: tos(46 << 2)}
			res, err := runErr(spec)
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			check(t, res, spec, 46)
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(ends) != sessions {
		t.Fatalf("%d sessions ended, want %d", len(ends), sessions)
	}
	for _, e := range ends {
		// The first request always goes through the shared socket, and
		// more while the session's socket is opened: how many depends on
		// how soon a busy machine runs the opening, so what holds on any
		// machine is that the session's socket opened and answered.
		if e.SessionSocket == nil || *e.SessionSocket == 0 || e.SharedOnly != "" {
			n := int64(-1)
			if e.SessionSocket != nil {
				n = *e.SessionSocket
			}
			t.Errorf("session socket answered %d of %d transactions (shared only: %q), want its own socket to answer", n, e.Served, e.SharedOnly)
		}
	}
}

// TestProgressReports: with Env.OnInterval set, rr reports each second's
// transactions as iperf3 reports intervals: contiguous periods from 0 to
// the end, their transactions summing to the result's, each with its own
// round-trip percentiles.
func TestProgressReports(t *testing.T) {
	addr := probetest.Start(t, Handler{})
	for _, p := range []string{ProtoUDP, ProtoTCP} {
		t.Run(p, func(t *testing.T) {
			var ivs []probe.Interval // the loop's goroutine alone appends
			spec := probe.Spec{Kind: probe.KindRR, Target: addr, Proto: p, Duration: dur(2500 * time.Millisecond), Timeout: dur(5 * time.Second)}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := Prober{}.Run(ctx, spec, probe.Env{OnInterval: func(iv probe.Interval) { ivs = append(ivs, iv) }})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(ivs) < 3 {
				t.Fatalf("%d progress reports in a 2.5 s run, want 2 whole seconds and the rest: %+v", len(ivs), ivs)
			}
			var sum int64
			prev := 0.0
			for i, iv := range ivs {
				if iv.Transactions == nil || iv.TransactionsPerS == nil {
					t.Fatalf("report %d has no transaction count or rate: %+v", i, iv)
				}
				if iv.StartS != prev || iv.EndS <= iv.StartS {
					t.Errorf("report %d spans %.3f-%.3f s after one ending at %.3f", i, iv.StartS, iv.EndS, prev)
				}
				if i < len(ivs)-1 && iv.EndS-iv.StartS < ReportEvery.Seconds() {
					t.Errorf("report %d spans %.3f s, want a whole period of %v", i, iv.EndS-iv.StartS, ReportEvery)
				}
				if *iv.Transactions > 0 && (iv.RTTP50ms == nil || iv.RTTP99ms == nil || *iv.RTTP50ms <= 0 || *iv.RTTP99ms < *iv.RTTP50ms) {
					t.Errorf("report %d: rtt p50 %v p99 %v, want 0 < p50 <= p99", i, iv.RTTP50ms, iv.RTTP99ms)
				}
				prev = iv.EndS
				sum += *iv.Transactions
			}
			if res.RTTms == nil || sum != res.RTTms.Count {
				t.Errorf("reports sum to %d transactions, the result has %v", sum, res.RTTms)
			}
			t.Log(probe.FormatInterval(ivs[0]))
		})
	}
}
