package iperf3wire_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/probe/iperf3wire"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/tcp"
)

// iperf3Path returns the iperf3 binary or skips: scripts/install-test-deps.sh
// installs Debian's iperf3.
func iperf3Path(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("iperf3 is not installed (scripts/install-test-deps.sh installs it)")
	}
	return p
}

// TestStockClientAgainstResponder runs Debian's iperf3 client against a
// cnperf responder that also serves cnperf's own tcp probe on the port.
func TestStockClientAgainstResponder(t *testing.T) {
	bin := iperf3Path(t)
	addr := probetest.Start(t, tcp.Handler{}, iperf3wire.NewServer())
	host, port, _ := net.SplitHostPort(addr)
	cases := []struct {
		name string
		args []string
	}{
		{"tcp", []string{"-t", "2"}},
		{"udp 1G", []string{"-t", "2", "-u", "-b", "1G"}},
		{"tcp reverse", []string{"-t", "2", "-R"}},
		{"udp reverse two streams", []string{"-t", "1", "-u", "-b", "20M", "-R", "-P", "2", "-l", "1200"}},
		{"tcp four streams 64K writes", []string{"-t", "1", "-P", "4", "-l", "64K"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"-c", host, "-p", port, "-J"}, c.args...)
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			if err != nil {
				t.Fatalf("iperf3 %v: %v\n%s", args, err, out)
			}
			var rep iperf3json.Doc
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("iperf3 -J output is not JSON: %v\n%s", err, out)
			}
			if rep.Error != "" {
				t.Fatalf("iperf3 reports an error: %s", rep.Error)
			}
			if rep.End.SumSent == nil || rep.End.SumReceived == nil {
				t.Fatalf("iperf3 -J output has no end.sum_sent or end.sum_received:\n%s", out)
			}
			rx, tx, secs := rep.End.SumReceived.BitsPerSecond, rep.End.SumSent.BitsPerSecond, rep.End.SumReceived.Seconds
			if rx <= 0 || tx <= 0 {
				t.Fatalf("end.sum_received.bits_per_second = %v, end.sum_sent = %v; want both > 0", rx, tx)
			}
			if rx > tx*1.05 {
				t.Errorf("received %.0f bit/s, more than the %.0f sent", rx, tx)
			}
			if secs < 0.9 || secs > 3.5 {
				t.Errorf("end.sum_received.seconds = %v, want about the test's length", secs)
			}
			t.Logf("iperf3 %s: sent %.3g bit/s, received %.3g bit/s over %.2f s", strings.Join(c.args, " "), tx, rx, secs)
		})
	}
}

// TestStockClientRefused checks that an option the responder cannot
// serve is refused with iperf3's error state, which the client prints
// with the reason, not a reset; one it serves runs.
func TestStockClientRefused(t *testing.T) {
	bin := iperf3Path(t)
	addr := probetest.Start(t, iperf3wire.NewServer())
	host, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-t", "1", "--fq-rate", "10M"}, "unable to set socket pacing: Operation not supported"},
		{[]string{"-t", "1", "-u", "--dont-fragment"}, "unable to set IP Do-Not-Fragment flag"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		args := append([]string{"-c", host, "-p", port}, c.args...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("iperf3 %v: want a non-zero exit, got %v\n%s", c.args, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("iperf3 %v: want %q in its error, got:\n%s", c.args, c.want, out)
		}
	}
}

// TestServerRefusesWithReason drives the protocol by hand for refusals a
// stock client cannot reach (it checks its own sockets first): each gets
// SERVER_ERROR with the iperf3 error code (and errno) whose text names the
// option, before or after the streams open.
func TestServerRefusesWithReason(t *testing.T) {
	addr := probetest.Start(t, iperf3wire.NewServer())
	for _, c := range []struct {
		name      string
		params    string
		streams   bool // the refusal comes once the data stream is open
		code, eno int32
	}{
		{"-R with --bidir", `{"tcp":true,"time":1,"reverse":true,"bidirectional":true}`, false, 25, 0},
		{"-O 61", `{"tcp":true,"time":1,"omit":61}`, false, 12, 0},
		{"-S 256", `{"tcp":true,"time":1,"TOS":256}`, false, 21, 0},
		{"-C with a bad name", `{"tcp":true,"time":1,"congestion":"no such"}`, false, 134, 0},
		{"no end", `{"tcp":true,"time":0}`, false, 13, 0},
		{"--fq-rate", `{"tcp":true,"time":1,"fqrate":1000000}`, false, 140, 95},
		{"-w past the kernel's maximum", `{"tcp":true,"time":1,"window":536870912}`, true, 141, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			cookie := iperf3wire.NewCookie()
			if _, err := conn.Write(cookie[:]); err != nil {
				t.Fatal(err)
			}
			state := func() byte {
				var b [1]byte
				if _, err := io.ReadFull(conn, b[:]); err != nil {
					t.Fatalf("read state: %v", err)
				}
				return b[0]
			}
			if s := state(); s != 9 {
				t.Fatalf("state %d, want PARAM_EXCHANGE (9)", s)
			}
			msg := make([]byte, 4+len(c.params))
			binary.BigEndian.PutUint32(msg, uint32(len(c.params)))
			copy(msg[4:], c.params)
			if _, err := conn.Write(msg); err != nil {
				t.Fatal(err)
			}
			if c.streams {
				if s := state(); s != 10 {
					t.Fatalf("state %d, want CREATE_STREAMS (10)", s)
				}
				data, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer data.Close()
				if _, err := data.Write(cookie[:]); err != nil {
					t.Fatal(err)
				}
			}
			if s := state(); s != 0xFE {
				t.Fatalf("state %#x, want SERVER_ERROR (0xfe)", s)
			}
			var codes [8]byte
			if _, err := io.ReadFull(conn, codes[:]); err != nil {
				t.Fatal(err)
			}
			code, eno := int32(binary.BigEndian.Uint32(codes[:4])), int32(binary.BigEndian.Uint32(codes[4:]))
			if code != c.code || eno != c.eno {
				t.Errorf("error %d errno %d, want %d errno %d", code, eno, c.code, c.eno)
			}
		})
	}
}

// TestClientAgainstStockServer runs cnperf's iperf3 client against
// Debian's `iperf3 -s`.
func TestClientAgainstStockServer(t *testing.T) {
	srv := probetest.StartIperf3Server(t)
	target := srv.Addr
	rate := uint64(50_000_000)
	ef := 0xb8
	cases := []struct {
		name string
		spec probe.Spec
	}{
		{"tcp", probe.Spec{Kind: "tcp", Duration: probe.Duration(2 * time.Second)}},
		{"tcp reverse two streams", probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second), Reverse: true, Streams: 2}},
		{"udp 50M", probe.Spec{Kind: "udp", Duration: probe.Duration(time.Second), RateBps: &rate}},
		{"udp reverse", probe.Spec{Kind: "udp", Duration: probe.Duration(time.Second), RateBps: &rate, Reverse: true}},
		{"tcp reverse -S -w -M", probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second), Reverse: true, TOS: &ef,
			WindowBytes: 256 << 10, MSS: 1000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.spec.Target = target
			res, err := iperf3wire.Run(ctx, c.spec, nil)
			srv.WaitReady(t) // iperf3 -s listens anew after each test
			if err != nil {
				t.Fatalf("run against iperf3 -s: %v", err)
			}
			if res.ThroughputBps == nil || res.ThroughputBps.Receiver <= 0 || res.ThroughputBps.Sender <= 0 {
				t.Fatalf("throughput_bps = %+v, want both sides > 0", res.ThroughputBps)
			}
			if c.spec.Kind == "udp" && (res.Packets == nil || res.Packets.Received <= 0 || res.JitterMs == nil) {
				t.Errorf("udp result without packets or jitter: %+v", res)
			}
			if len(res.Streams) != max(c.spec.Streams, 1) {
				t.Errorf("%d streams in the result, want %d", len(res.Streams), max(c.spec.Streams, 1))
			}
			t.Logf("%s: sender %.3g bit/s, receiver %.3g bit/s", c.name, res.ThroughputBps.Sender, res.ThroughputBps.Receiver)
		})
	}
}

// TestParamsBoundedBeforeAdmission: a new test's parameters are read
// before anything checks them, so their size is held to a few KB: a
// client announcing 1 MiB of parameters is refused at once, not read.
func TestParamsBoundedBeforeAdmission(t *testing.T) {
	addr := probetest.Start(t, iperf3wire.NewServer())
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cookie := iperf3wire.NewCookie()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(cookie[:]); err != nil {
		t.Fatal(err)
	}
	var state [1]byte
	if _, err := c.Read(state[:]); err != nil || state[0] != 9 { // PARAM_EXCHANGE
		t.Fatalf("state %d, %v: want PARAM_EXCHANGE (9)", state[0], err)
	}
	if _, err := c.Write([]byte{0, 0x10, 0, 0}); err != nil { // 1 MiB of JSON to come
		t.Fatal(err)
	}
	if _, err := c.Read(state[:]); err != nil || state[0] != 0xFE {
		t.Errorf("after announcing 1 MiB of parameters: state %#x, %v; want SERVER_ERROR (0xfe) at once", state[0], err)
	}
}

// TestClientIntervals: against `iperf3 -s`, the client reports intervals
// at its -i as iperf3's client prints [SUM] lines: contiguous from 0 to
// the end, summing to the bytes the client counted (sent, or received with
// -R), with udp's datagrams, loss and jitter received and a tcp sender's
// retransmits.
func TestClientIntervals(t *testing.T) {
	srv := probetest.StartIperf3Server(t)
	rate := uint64(20_000_000)
	cases := []struct {
		name string
		spec probe.Spec
	}{
		{"tcp two streams", probe.Spec{Kind: "tcp", Streams: 2}},
		{"udp reverse", probe.Spec{Kind: "udp", RateBps: &rate, Reverse: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.spec.Target = srv.Addr
			c.spec.Duration = probe.Duration(1500 * time.Millisecond)
			c.spec.Interval = probe.Duration(500 * time.Millisecond)
			var ivs []probe.Interval // Run's reports come one after another
			res, err := iperf3wire.Run(ctx, c.spec, func(iv probe.Interval) { ivs = append(ivs, iv) })
			srv.WaitReady(t)
			if err != nil {
				t.Fatalf("run against iperf3 -s: %v", err)
			}
			if len(ivs) < 2 {
				t.Fatalf("%d interval reports in a 1.5 s run at -i 0.5, want at least 2: %+v", len(ivs), ivs)
			}
			var sum float64
			prev := 0.0
			for i, iv := range ivs {
				if iv.StartS != prev || iv.EndS <= iv.StartS {
					t.Errorf("interval %d spans %.3f-%.3f s after one ending at %.3f", i, iv.StartS, iv.EndS, prev)
				}
				if c.spec.Kind == "udp" && (iv.Packets == nil || iv.LossPct == nil || iv.JitterMs == nil) {
					t.Errorf("udp -R interval %d lacks datagrams, loss or jitter: %+v", i, iv)
				}
				if c.spec.Kind == "tcp" && iv.Retransmits == nil {
					t.Errorf("tcp sender's interval %d lacks retransmits: %+v", i, iv)
				}
				prev = iv.EndS
				sum += iv.Bytes
			}
			mine := res.Bytes.Sender
			if c.spec.Reverse {
				mine = res.Bytes.Receiver
			}
			if sum != mine || sum <= 0 {
				t.Errorf("intervals sum to %v bytes, the client counted %v", sum, mine)
			}
			t.Log(probe.FormatInterval(ivs[0]))
		})
	}
}
