package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

// startResponder serves every registered handler on loopback and returns
// its address and a function that kills it (also called in t.Cleanup).
func startResponder(t *testing.T) (string, func()) {
	t.Helper()
	r := engine.NewResponder(nil, handlers()...)
	if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatalf("responder: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Serve(ctx)
	}()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("responder did not stop within 10s")
			}
		})
	}
	t.Cleanup(kill)
	return r.Addr().String(), kill
}

// cnperf runs the CLI in this process, bounded, and returns its exit code,
// stdout and stderr.
func cnperf(t *testing.T, bound time.Duration, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}) }()
	select {
	case code := <-done:
		return code, out.String(), errb.String()
	case <-time.After(bound):
		t.Fatalf("cnperf %s: still running after %v (a hang)", strings.Join(args, " "), bound)
		return 0, "", ""
	}
}

// has reports whether the decoded JSON v has the key path p: dotted keys,
// "name[]" for "every element of the array name" (at least one element),
// and a trailing "[]" alone for an array of numbers.
func has(v any, p string) error {
	if p == "" {
		if _, ok := v.(map[string]any); ok {
			return fmt.Errorf("is an object, want a value")
		}
		return nil
	}
	key, rest, _ := strings.Cut(p, ".")
	arr := strings.HasSuffix(key, "[]")
	key = strings.TrimSuffix(key, "[]")
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("not an object at %q", key)
	}
	sub, ok := m[key]
	if !ok {
		return fmt.Errorf("missing key %q", key)
	}
	if !arr {
		return has(sub, rest)
	}
	list, ok := sub.([]any)
	if !ok || len(list) == 0 {
		return fmt.Errorf("%q is not a non-empty array", key)
	}
	for i, e := range list {
		if rest == "" {
			if _, ok := e.(float64); !ok {
				return fmt.Errorf("%q[%d] is %T, want a number", key, i, e)
			}
			continue
		}
		if err := has(e, rest); err != nil {
			return fmt.Errorf("%q[%d]: %w", key, i, err)
		}
	}
	return nil
}

// The key paths of the "Result JSON" section, named exactly so.
var (
	keysEvery = []string{"kind", "src", "dst", "dscp", "started_at", "duration_s"}
	keysTCP   = []string{"throughput_bps.sender", "throughput_bps.receiver", "bytes.sender", "bytes.receiver",
		"retransmits", "cpu_pct.sender", "cpu_pct.receiver",
		"intervals[].start_s", "intervals[].end_s", "intervals[].throughput_bps", "dscp_received"}
	keysUDP = []string{"throughput_bps.sender", "throughput_bps.receiver", "bytes.sender", "bytes.receiver",
		"packets.sent", "packets.received", "packets.lost", "packets.out_of_order", "packets.duplicate",
		"loss_pct", "jitter_ms", "pps",
		"latency_ms.min", "latency_ms.avg", "latency_ms.max", "latency_ms.stdev", "latency_ms.p50", "latency_ms.p99",
		"histogram.bin_width_us", "histogram.counts[]", "dscp_received"}
	keysRTT = []string{"rtt_ms.min", "rtt_ms.avg", "rtt_ms.max", "rtt_ms.stdev", "rtt_ms.p50", "rtt_ms.p90", "rtt_ms.p99", "loss_pct", "dscp_received"}
	keysRR  = []string{"app_rtt_ms.min", "app_rtt_ms.avg", "app_rtt_ms.max", "app_rtt_ms.stdev",
		"app_rtt_ms.p50", "app_rtt_ms.p90", "app_rtt_ms.p99", "transactions_per_s"}
	keysTrace = []string{"hops[].ttl", "hops[].rtt_ms[]"}
)

// TestProbeJSONKeys runs every probe kind through the CLI against a real
// responder on loopback and checks that each key path of the documented
// result JSON is there, and that the mark survived where it is checked.
func TestProbeJSONKeys(t *testing.T) {
	addr, _ := startResponder(t)
	type tc struct {
		name string
		args []string
		keys [][]string
	}
	cases := []tc{
		{"tcp", []string{"tcp", "--to", addr, "--time", "1s", "--interval", "250ms", "--dscp", "EF"}, [][]string{keysTCP}},
		{"tcp reverse", []string{"tcp", "--to", addr, "--time", "1s", "--reverse", "-P", "2", "--dscp", "AF41"}, [][]string{keysTCP}},
		{"udp", []string{"udp", "--to", addr, "--time", "1s", "--rate", "20M", "--dscp", "AF41", "--hist-bin", "5us", "--hist-bins", "100"}, [][]string{keysUDP}},
		{"udp reverse", []string{"udp", "--to", addr, "--time", "1s", "--rate", "20M", "--reverse", "--tos", "0x10"}, [][]string{keysUDP}},
		{"rr udp", []string{"rr", "--to", addr, "--proto", "udp", "--count", "200", "--dscp", "EF"}, [][]string{keysRTT, keysRR}},
		{"rr tcp", []string{"rr", "--to", addr, "--proto", "tcp", "--count", "200", "--dscp", "EF"}, [][]string{keysRTT, keysRR}},
		{"rr crr", []string{"rr", "--to", addr, "--proto", "crr", "--count", "50", "--dscp", "CS1"}, [][]string{keysRTT, keysRR}},
	}
	cases = append(cases,
		tc{"ping", []string{"ping", "--to", "127.0.0.1", "--count", "3", "--interval", "20ms", "--dscp", "EF"}, [][]string{keysRTT}},
		tc{"trace", []string{"trace", "--to", "127.0.0.1", "--max-ttl", "3"}, [][]string{keysTrace}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"probe"}, append(c.args, "--json", "--log-level", "error")...)
			code, out, errs := cnperf(t, 60*time.Second, args...)
			if code != 0 {
				if c.name == "ping" || c.name == "trace" {
					if strings.Contains(errs, "socket") || strings.Contains(errs, "permission") {
						t.Skipf("skipping: no ICMP here: %s", errs)
					}
				}
				t.Fatalf("exit %d: %s", code, errs)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("stdout is not one JSON result: %v\n%s", err, out)
			}
			paths := append([]string(nil), keysEvery...)
			for _, k := range c.keys {
				paths = append(paths, k...)
			}
			for _, p := range paths {
				if err := has(v, p); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			if v["kind"] != strings.Fields(c.name)[0] {
				t.Errorf("kind %v", v["kind"])
			}
			if _, ok := v["dscp_received"]; ok {
				if s, _ := v["dscp_survived"].(bool); !s {
					t.Errorf("dscp %v sent, %v received: the mark did not survive loopback", v["dscp"], v["dscp_received"])
				}
			}
		})
	}
}

// TestProbeBadInput checks the bad-input cases of the issue end to end:
// each gives a clear error naming the problem, a non-zero exit, and ends
// within its bound.
func TestProbeBadInput(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := l.Addr().String()
		l.Close()
		return a
	}()
	addr, _ := startResponder(t)
	cases := []struct {
		name  string
		args  []string
		want  string
		bound time.Duration
	}{
		{"unknown dscp name", []string{"tcp", "--to", addr, "--dscp", "EX"}, `dscp "EX": not a known name`, 2 * time.Second},
		{"dscp out of range", []string{"udp", "--to", addr, "--dscp", "64"}, "must be 0-63", 2 * time.Second},
		{"tos out of range", []string{"udp", "--to", addr, "--tos", "0x100"}, "must be 0-255", 2 * time.Second},
		{"dscp and tos", []string{"udp", "--to", addr, "--tos", "0x10", "--dscp", "EF"}, "not both", 2 * time.Second},
		{"negative time tcp", []string{"tcp", "--to", addr, "--time", "-1s"}, "must not be negative", 2 * time.Second},
		{"negative time udp", []string{"udp", "--to", addr, "--time", "-5s"}, "must not be negative", 2 * time.Second},
		{"negative interval", []string{"tcp", "--to", addr, "--interval", "-1s"}, "must not be negative", 2 * time.Second},
		{"negative time rr", []string{"rr", "--to", addr, "--time", "-1ms"}, "must not be negative", 2 * time.Second},
		{"negative bare seconds", []string{"tcp", "--to", addr, "--time", "-1"}, "must not be negative", 2 * time.Second},
		{"time neither duration nor seconds", []string{"tcp", "--to", addr, "--time", "2x"}, `"2x": want a duration like 10s or 500ms, or a number of seconds`, 2 * time.Second},
		{"negative ping interval", []string{"ping", "--to", "127.0.0.1", "--interval", "-1s"}, "negative", 2 * time.Second},
		{"rate 0 for rr", []string{"rr", "--to", addr, "--rate", "0"}, "rate 0", 2 * time.Second},
		{"bad rate", []string{"udp", "--to", addr, "--rate", "10X"}, `rate "10X"`, 2 * time.Second},
		{"unknown kind", []string{"sctp", "--to", addr}, `unknown probe kind "sctp"`, 2 * time.Second},
		{"no target", []string{"tcp"}, "--to is required", 2 * time.Second},
		{"refused port tcp", []string{"tcp", "--to", closed, "--time", "1s"}, "connection refused", 5 * time.Second},
		{"refused port udp", []string{"udp", "--to", closed, "--time", "1s"}, "connection refused", 5 * time.Second},
		{"refused port rr", []string{"rr", "--to", closed, "--proto", "udp"}, "connection refused", 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			code, _, errs := cnperf(t, 2*tc.bound+5*time.Second, append([]string{"probe"}, tc.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, want a failure")
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q does not say %q", errs, tc.want)
			}
			if d := time.Since(t0); d > tc.bound {
				t.Errorf("took %v, want under %v", d, tc.bound)
			}
		})
	}
}

// TestProbeUnreachableHost probes an address nothing routes to, from a
// namespace with no routes, so the kernel answers at once and no packet
// leaves this host.
func TestProbeUnreachableHost(t *testing.T) {
	nettest.Require(t)
	ns, err := nettest.NewNS(nettest.Prefix + "p-cli-unreach")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nettest.Delete(ns) })
	for _, kind := range []string{"tcp", "udp", "rr"} {
		t.Run(kind, func(t *testing.T) {
			var code int
			var errs string
			t0 := time.Now()
			// Main runs on this namespace's locked thread itself (a new
			// goroutine would run, and dial, outside the namespace); the
			// kernel's answer and --timeout bound it.
			_ = ns.Do(func() error {
				var out, eb bytes.Buffer
				code = Main([]string{"probe", kind, "--to", "198.18.0.77:5201", "--time", "1s", "--timeout", "2s"},
					Streams{In: strings.NewReader(""), Out: &out, Err: &eb})
				errs = eb.String()
				return nil
			})
			if code == 0 || !strings.Contains(errs, "unreachable") {
				t.Errorf("exit %d, stderr %q: want a non-zero exit saying unreachable", code, errs)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestProbeResponderKilled kills the responder a moment into a 10 s test:
// the probe must exit non-zero with an error well before the test's end.
func TestProbeResponderKilled(t *testing.T) {
	for _, args := range [][]string{
		{"tcp", "--time", "10s"},
		{"tcp", "--time", "10s", "--reverse"},
		{"udp", "--time", "10s", "--rate", "10M"},
		{"udp", "--time", "10s", "--rate", "10M", "--reverse"},
		{"rr", "--time", "10s", "--proto", "udp"},
		{"rr", "--time", "10s", "--proto", "tcp"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			addr, kill := startResponder(t)
			time.AfterFunc(700*time.Millisecond, kill)
			t0 := time.Now()
			code, _, errs := cnperf(t, 30*time.Second, append([]string{"probe", args[0], "--to", addr}, args[1:]...)...)
			if code == 0 {
				t.Fatalf("exit 0 although the responder was killed")
			}
			if strings.TrimSpace(errs) == "" {
				t.Errorf("no error message")
			}
			t.Logf("stderr: %s", strings.TrimSpace(errs))
			if d := time.Since(t0); d > 7*time.Second {
				t.Errorf("noticed after %v; want well before the 10s test ends", d)
			}
		})
	}
}

// TestProbeSourceBinding binds every kind to 127.0.0.2 (loopback holds all
// of 127/8) and checks the result's source is that address.
func TestProbeSourceBinding(t *testing.T) {
	addr, _ := startResponder(t)
	for _, args := range [][]string{
		{"tcp", "--to", addr, "--time", "300ms"},
		{"tcp", "--to", addr, "--time", "300ms", "--reverse"},
		{"udp", "--to", addr, "--time", "300ms", "--rate", "10M"},
		{"udp", "--to", addr, "--time", "300ms", "--rate", "10M", "--reverse"},
		{"rr", "--to", addr, "--proto", "udp", "--count", "20"},
		{"rr", "--to", addr, "--proto", "tcp", "--count", "20"},
		{"rr", "--to", addr, "--proto", "crr", "--count", "5"},
		{"ping", "--to", "127.0.0.1", "--count", "2", "--interval", "20ms"},
	} {
		t.Run(strings.Join(args[:1], "")+" "+strings.Join(args[3:], " "), func(t *testing.T) {
			code, out, errs := cnperf(t, 30*time.Second, append([]string{"probe"}, append(args, "--source", "127.0.0.2", "--json")...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var v struct{ Src string }
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatal(err)
			}
			host := v.Src
			if h, _, err := net.SplitHostPort(v.Src); err == nil {
				host = h
			}
			if host != "127.0.0.2" {
				t.Errorf("src %q, want bound to 127.0.0.2", v.Src)
			}
		})
	}
}

// TestProbeFailuresAsUsersExpect: a --json run that fails prints
// {"error": ...} on stdout (as iperf3 -J does) and exits non-zero; stamp
// and ping exit 1 when nothing came back (as ping does), after printing
// what they measured; a tcp probe against a stock iperf3 server fails at
// once and suggests --peer iperf3.
func TestProbeFailuresAsUsersExpect(t *testing.T) {
	code, out, _ := cnperf(t, 20*time.Second, "probe", "tcp", "--to", "127.0.0.1:1", "--time", "1s", "--json")
	var doc map[string]string
	if err := json.Unmarshal([]byte(out), &doc); code == 0 || err != nil || !strings.Contains(doc["error"], "127.0.0.1:1") {
		t.Errorf("failed --json run: exit %d, stdout %q; want non-zero and {\"error\": ...} naming the target", code, out)
	}

	// A UDP socket that reads test packets and never answers.
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := hole.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	args := []string{"probe", "stamp", "--to", hole.LocalAddr().String(), "-c", "3", "-i", "10ms", "--timeout", "300ms"}
	code, out, errOut := cnperf(t, 20*time.Second, args...)
	if code != 1 || !strings.Contains(errOut, "no replies") || out == "" {
		t.Errorf("stamp at 100%% loss: exit %d, stdout %q, stderr %q; want exit 1 after the summary", code, out, errOut)
	}
	code, out, _ = cnperf(t, 20*time.Second, append(args, "--json")...)
	var res probe.Result
	if err := json.Unmarshal([]byte(out), &res); code != 1 || err != nil || res.LossPct == nil || *res.LossPct != 100 {
		t.Errorf("stamp --json at 100%% loss: exit %d, stdout %q; want exit 1 and one result document with loss_pct 100", code, out)
	}

	stock := probetest.StartIperf3Server(t).Addr
	start := time.Now()
	code, _, errOut = cnperf(t, 20*time.Second, "probe", "tcp", "--to", stock, "--time", "1s")
	if code == 0 || !strings.Contains(errOut, "--peer iperf3") {
		t.Errorf("tcp against iperf3 -s: exit %d, stderr %q; want a failure suggesting --peer iperf3", code, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("tcp against iperf3 -s took %v to fail; want at once", took)
	}
}

// TestProbeJSONEchoesRequest: every kind's JSON result carries the request
// it was asked (direction, streams, total rate, size, duration, dscp and
// the kind's own fields), from cnperf's probers and from an iperf3 peer.
func TestProbeJSONEchoesRequest(t *testing.T) {
	addr, _ := startResponder(t)
	type want = requestWant
	cases := []struct {
		name string
		args []string
		want want
	}{
		{"tcp reverse", []string{"tcp", "--to", addr, "-t", "1s", "-R", "-P", "2", "-b", "50M", "-l", "32K", "--dscp", "AF41"},
			want{"reverse", 2, 100e6, 32 << 10, 1, 34, 0, 0, ""}},
		{"tcp", []string{"tcp", "--to", addr, "-t", "1s", "-i", "500ms"},
			want{"forward", 1, -1, 0, 1, 0, 0, 0.5, ""}},
		{"udp reverse", []string{"udp", "--to", addr, "-t", "1s", "-b", "20M", "-R", "-l", "1200", "--dscp", "EF"},
			want{"reverse", 1, 20e6, 1200, 1, 46, 0, 0, ""}},
		{"rr", []string{"rr", "--to", addr, "--proto", "udp", "-c", "50", "-i", "1ms", "--dscp", "CS1"},
			want{"forward", 1, -1, 0, 0, 8, 50, 0.001, "udp"}},
		{"stamp", []string{"stamp", "--to", startReflector(t), "-c", "20", "-i", "5ms"},
			want{"forward", 1, -1, 0, 0, 0, 20, 0.005, ""}},
		{"ping", []string{"ping", "--to", "127.0.0.1", "-c", "3", "-i", "20ms", "-l", "100", "--dscp", "EF"},
			want{"forward", 1, -1, 100, 0, 46, 3, 0.02, ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"probe"}, append(c.args, "--json", "--log-level", "error")...)
			code, out, errs := cnperf(t, 60*time.Second, args...)
			if code != 0 {
				if c.name == "ping" && (strings.Contains(errs, "socket") || strings.Contains(errs, "permission")) {
					t.Skipf("skipping: no ICMP here: %s", errs)
				}
				t.Fatalf("exit %d: %s", code, errs)
			}
			checkRequest(t, out, c.want)
		})
	}
	t.Run("tcp reverse --peer iperf3", func(t *testing.T) {
		stock := probetest.StartIperf3Server(t).Addr
		code, out, errs := cnperf(t, 60*time.Second, "probe", "tcp", "--peer", "iperf3", "--to", stock,
			"-t", "1", "-R", "-P", "2", "-b", "30M", "-l", "8K", "--json", "--log-level", "error")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		checkRequest(t, out, want{"reverse", 2, 60e6, 8 << 10, 1, 0, 0, 0, ""})
	})
}

// startReflector serves an open STAMP reflector on loopback until the test
// ends and returns its address.
func startReflector(t *testing.T) string {
	t.Helper()
	refl, err := stamp.NewReflector(stamp.ReflectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := refl.Listen(ctx, "127.0.0.1:0"); err != nil {
		cancel()
		t.Fatalf("stamp reflector: %v", err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = refl.Serve(ctx) }()
	t.Cleanup(func() { cancel(); refl.Close(); <-done })
	return refl.Addr().String()
}

// requestWant is the request a result should echo.
type requestWant struct {
	direction   string
	streams     int
	rate        float64 // -1: absent
	size        int
	durationS   float64
	dscp, count int
	intervalS   float64
	proto       string
}

// checkRequest decodes one JSON result and compares its request with w.
func checkRequest(t *testing.T, out string, w requestWant) {
	t.Helper()
	var v struct {
		Request map[string]any `json:"request"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stdout is not one JSON result: %v\n%s", err, out)
	}
	r := v.Request
	if r == nil {
		t.Fatalf("no request in the result:\n%s", out)
	}
	num := func(k string) float64 { f, _ := r[k].(float64); return f }
	if r["direction"] != w.direction {
		t.Errorf("request.direction %v, want %s", r["direction"], w.direction)
	}
	if num("streams") != float64(w.streams) {
		t.Errorf("request.streams %v, want %d", r["streams"], w.streams)
	}
	if rate, ok := r["rate_bps"]; w.rate < 0 && ok || w.rate >= 0 && rate != w.rate {
		t.Errorf("request.rate_bps %v, want %v (-1: absent)", rate, w.rate)
	}
	if dscp, ok := r["dscp"]; !ok || dscp != float64(w.dscp) {
		t.Errorf("request.dscp %v, want %d", dscp, w.dscp)
	}
	for k, want := range map[string]float64{"size": float64(w.size), "duration_s": w.durationS,
		"count": float64(w.count), "interval_s": w.intervalS} {
		if num(k) != want {
			t.Errorf("request.%s %v, want %v", k, r[k], want)
		}
	}
	if p, _ := r["proto"].(string); p != w.proto {
		t.Errorf("request.proto %q, want %q", p, w.proto)
	}
}
