package iperf3wire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/probe/iperf3wire"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/wirewatch"
)

// clientDoc is a stock client's -J output: iperf3's document plus the
// fields only a client writes.
type clientDoc struct {
	iperf3json.Doc
	End struct {
		iperf3json.End
		SumSentBidirReverse     *iperf3json.Sum `json:"sum_sent_bidir_reverse"`
		SumReceivedBidirReverse *iperf3json.Sum `json:"sum_received_bidir_reverse"`
	} `json:"end"`
	ServerOutputJSON *iperf3json.Doc `json:"server_output_json"`
	ServerOutputText string          `json:"server_output_text"`
}

const (
	mib    = 1 << 20
	tosEF  = 0xb8 // DSCP 46 (EF) in the TOS byte
	dscpEF = 46
)

// kernelHas reports whether the kernel offers congestion control name.
func kernelHas(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return err == nil && slices.Contains(strings.Fields(string(b)), name)
}

// watchMark watches loopback for the packets the responder sends from
// port (proto tcp or udp) for d and returns the DSCP most of them carried;
// ok is false without CAP_NET_RAW (not root).
func watchMark(t *testing.T, proto string, port int, d time.Duration) (wait func() (dscp int, packets int64, ok bool)) {
	if os.Geteuid() != 0 {
		return func() (int, int64, bool) { return 0, 0, false }
	}
	spec := probe.Spec{Kind: probe.KindWire, Target: "127.0.0.1", Duration: probe.Duration(d),
		Watch: &probe.WatchFlow{Proto: proto, Src: "127.0.0.1", Dst: "127.0.0.1", SrcPort: port}}
	type out struct {
		res *probe.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := wirewatch.Prober{}.Run(context.Background(), spec, probe.Env{})
		done <- out{res, err}
	}()
	time.Sleep(200 * time.Millisecond) // the watch's socket opens first
	return func() (int, int64, bool) {
		o := <-done
		if o.err != nil {
			t.Errorf("wire watch on loopback: %v", o.err)
			return 0, 0, false
		}
		w := o.res.WireDSCP
		if w.Outer == nil {
			return -1, w.Packets, true
		}
		return *w.Outer, w.Packets, true
	}
}

// TestStockClientOptions runs Debian's iperf3 3.12 client with each option
// the responder serves against `cnperf respond`'s iperf3 server on
// loopback and checks what holds on any machine. Run with -v for the
// table of options and results.
func TestStockClientOptions(t *testing.T) {
	bin := iperf3Path(t)
	addr := probetest.Start(t, iperf3wire.NewServer())
	host, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	type check func(t *testing.T, d clientDoc) string
	cases := []struct {
		name  string
		args  []string
		watch string // tcp/udp: watch the responder's marks on loopback
		check check
	}{
		{"-n 10M", []string{"-n", "10M"}, "", func(t *testing.T, d clientDoc) string {
			sent := d.End.SumSent.Bytes
			if sent < 10*mib {
				t.Errorf("sum_sent.bytes = %.0f, want >= 10 MiB", sent)
			}
			if d.End.SumReceived.Bytes <= 0 {
				t.Errorf("sum_received.bytes = %.0f, want > 0", d.End.SumReceived.Bytes)
			}
			return fmt.Sprintf("sent %.1f MiB, ended", sent/mib)
		}},
		{"-R -n 10M", []string{"-R", "-n", "10M"}, "", func(t *testing.T, d clientDoc) string {
			got := d.End.SumReceived.Bytes
			if got < 10*mib {
				t.Errorf("sum_received.bytes = %.0f, want >= 10 MiB", got)
			}
			return fmt.Sprintf("received %.1f MiB from the responder, ended", got/mib)
		}},
		{"-k 200 -l 64K", []string{"-k", "200", "-l", "64K"}, "", func(t *testing.T, d clientDoc) string {
			sent, block := d.End.SumSent.Bytes, 64.0*1024
			// iperf_send may write one block past the count before the
			// client's loop sees it and ends the test.
			if sent < 200*block || sent > 202*block {
				t.Errorf("sum_sent.bytes = %.0f, want 200-202 blocks of 64 KiB (%.0f-%.0f)", sent, 200*block, 202*block)
			}
			return fmt.Sprintf("sent %.1f blocks of 64 KiB", sent/block)
		}},
		{"-O 1 -t 2", []string{"-O", "1", "-t", "2", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			var omitted, counted int
			for _, iv := range d.Intervals {
				if iv.Sum.Omitted != nil && *iv.Sum.Omitted {
					omitted++
				} else {
					counted++
				}
			}
			if omitted == 0 || counted == 0 || d.Intervals[0].Sum.Omitted == nil || !*d.Intervals[0].Sum.Omitted {
				t.Errorf("%d omitted and %d counted intervals, the first omitted=%v; want the first second omitted", omitted, counted, d.Intervals[0].Sum.Omitted)
			}
			// The responder's figures (sum_received) leave the omitted
			// second out too: about 2 s, not 3.
			if s := d.End.SumReceived.Seconds; s < 1.5 || s > 2.6 {
				t.Errorf("sum_received.seconds = %.2f, want about 2 (the omitted second not counted)", s)
			}
			// The responder's own intervals: its first second omitted too.
			s := serverDoc(t, d)
			if len(s.Intervals) < 2 || !s.Intervals[0].Sum.IsOmitted() || s.Intervals[len(s.Intervals)-1].Sum.IsOmitted() {
				t.Errorf("responder's intervals: %d, want the first omitted and the last not", len(s.Intervals))
			}
			return fmt.Sprintf("%d omitted, %d counted intervals; responder counted %.2f s", omitted, counted, d.End.SumReceived.Seconds)
		}},
		{"-C reno", []string{"-t", "1", "-C", "reno"}, "", func(t *testing.T, d clientDoc) string {
			if !kernelHas("reno") {
				return "kernel lacks reno: not checked"
			}
			if d.End.SenderTCPCongestion != "reno" || d.End.ReceiverTCPCongestion != "reno" {
				t.Errorf("sender_tcp_congestion %q, receiver_tcp_congestion %q; want reno both", d.End.SenderTCPCongestion, d.End.ReceiverTCPCongestion)
			}
			return "sender " + d.End.SenderTCPCongestion + ", receiver (responder) " + d.End.ReceiverTCPCongestion
		}},
		{"-R -C reno", []string{"-t", "1", "-R", "-C", "reno"}, "", func(t *testing.T, d clientDoc) string {
			if !kernelHas("reno") {
				return "kernel lacks reno: not checked"
			}
			if d.End.SenderTCPCongestion != "reno" {
				t.Errorf("sender_tcp_congestion (the responder) %q, want reno", d.End.SenderTCPCongestion)
			}
			return "sender (responder) " + d.End.SenderTCPCongestion
		}},
		{"--bidir", []string{"-t", "1", "--bidir"}, "", bidirCheck},
		{"--bidir -u", []string{"-t", "1", "--bidir", "-u", "-b", "10M"}, "", bidirCheck},
		{"--bidir -P 2", []string{"-t", "1", "--bidir", "-P", "2"}, "", bidirCheck},
		{"-w 256K", []string{"-t", "1", "-w", "256K", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			s := serverDoc(t, d)
			if s.Start.SockBufsize != 256*1024 || s.Start.SndbufActual < 256*1024 || s.Start.RcvbufActual < 256*1024 {
				t.Errorf("responder: sock_bufsize %d, sndbuf_actual %d, rcvbuf_actual %d; want 262144 and at least that",
					s.Start.SockBufsize, s.Start.SndbufActual, s.Start.RcvbufActual)
			}
			return fmt.Sprintf("responder's data socket: SO_SNDBUF %d, SO_RCVBUF %d", s.Start.SndbufActual, s.Start.RcvbufActual)
		}},
		{"-u -w 256K", []string{"-t", "1", "-u", "-b", "10M", "-w", "256K", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			s := serverDoc(t, d)
			if s.Start.SndbufActual < 256*1024 || s.Start.RcvbufActual < 256*1024 {
				t.Errorf("responder: sndbuf_actual %d, rcvbuf_actual %d; want at least 262144", s.Start.SndbufActual, s.Start.RcvbufActual)
			}
			return fmt.Sprintf("shared UDP socket: SO_SNDBUF %d, SO_RCVBUF %d", s.Start.SndbufActual, s.Start.RcvbufActual)
		}},
		{"-M 1000", []string{"-t", "1", "-M", "1000", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			s := serverDoc(t, d)
			if s.Start.TCPMSS <= 0 || s.Start.TCPMSS > 1000 {
				t.Errorf("responder's data socket MSS %d, want 1-1000", s.Start.TCPMSS)
			}
			return fmt.Sprintf("responder's data socket MSS %d", s.Start.TCPMSS)
		}},
		{"-R -S 0xb8", []string{"-t", "2", "-R", "-S", "0xb8", "--get-server-output"}, "tcp", func(t *testing.T, d clientDoc) string {
			if s := serverDoc(t, d); s.Start.TestStart == nil || s.Start.TestStart.TOS != tosEF {
				t.Errorf("responder's test_start.tos = %+v, want 184", s.Start.TestStart)
			}
			return "responder's test_start.tos 184"
		}},
		{"-R -u -S 0xb8", []string{"-t", "2", "-R", "-u", "-b", "10M", "-S", "0xb8"}, "udp", func(t *testing.T, d clientDoc) string {
			if d.End.SumReceived.Bytes <= 0 {
				t.Errorf("sum_received.bytes = %v, want > 0", d.End.SumReceived.Bytes)
			}
			return fmt.Sprintf("received %.1f MiB", d.End.SumReceived.Bytes/mib)
		}},
		{"--get-server-output", []string{"-t", "1", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			s := serverDoc(t, d)
			checkServerDoc(t, s, d)
			return fmt.Sprintf("server_output_json: %s; responder received %.0f bytes", s.Start.SystemInfo, s.End.SumReceived.Bytes)
		}},
		{"-u --get-server-output", []string{"-t", "1", "-u", "-b", "10M", "--get-server-output"}, "", func(t *testing.T, d clientDoc) string {
			s := serverDoc(t, d)
			checkServerDoc(t, s, d)
			return fmt.Sprintf("server_output_json with %d UDP streams", len(s.End.Streams))
		}},
	}
	var mu sync.Mutex
	var table [][2]string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wait func() (int, int64, bool)
			if c.watch != "" {
				wait = watchMark(t, c.watch, port, 3*time.Second)
			}
			args := append([]string{"-c", host, "-p", portS, "-J"}, c.args...)
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			if err != nil {
				t.Fatalf("iperf3 %v: %v\n%s", args, err, out)
			}
			var d clientDoc
			if err := json.Unmarshal(out, &d); err != nil {
				t.Fatalf("iperf3 -J output is not JSON: %v\n%s", err, out)
			}
			if d.Error != "" {
				t.Fatalf("iperf3 %s: %s", strings.Join(c.args, " "), d.Error)
			}
			if d.End.SumSent == nil || d.End.SumReceived == nil {
				t.Fatalf("no end.sum_sent or end.sum_received:\n%s", out)
			}
			result := c.check(t, d)
			if wait != nil {
				dscp, n, ok := wait()
				switch {
				case !ok:
					result += "; mark on the wire not watched (needs root)"
				case dscp != dscpEF:
					t.Errorf("the responder's %s packets on loopback carried DSCP %d (%d packets), want %d", c.watch, dscp, n, dscpEF)
				default:
					result += fmt.Sprintf("; its %d %s packets on loopback carried DSCP %d", n, c.watch, dscp)
				}
			}
			if t.Failed() {
				result = "FAILED: " + result
			}
			mu.Lock()
			table = append(table, [2]string{c.name, result})
			mu.Unlock()
		})
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "option\tresult against cnperf respond")
	for _, r := range table {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
	t.Logf("stock iperf3 3.12 client options:\n%s", b.String())
}

// bidirCheck: --bidir gives both directions' sums, each with bytes.
func bidirCheck(t *testing.T, d clientDoc) string {
	e := d.End
	if e.SumSentBidirReverse == nil || e.SumReceivedBidirReverse == nil {
		t.Fatalf("no sum_sent_bidir_reverse or sum_received_bidir_reverse")
	}
	for name, s := range map[string]*iperf3json.Sum{"sum_sent": e.SumSent, "sum_received": e.SumReceived,
		"sum_sent_bidir_reverse": e.SumSentBidirReverse, "sum_received_bidir_reverse": e.SumReceivedBidirReverse} {
		if s.Bytes <= 0 {
			t.Errorf("%s.bytes = %v, want > 0", name, s.Bytes)
		}
	}
	return fmt.Sprintf("to responder %.3g bit/s, from responder %.3g bit/s", e.SumReceived.BitsPerSecond, e.SumReceivedBidirReverse.BitsPerSecond)
}

// serverDoc returns the responder's document the client received.
func serverDoc(t *testing.T, d clientDoc) *iperf3json.Doc {
	t.Helper()
	if d.ServerOutputJSON == nil {
		t.Fatalf("no server_output_json in the client's output (server_output_text %q)", d.ServerOutputText)
	}
	return d.ServerOutputJSON
}

// checkServerDoc checks the responder's document against the client's:
// the fields iperf3 writes, and the responder's received bytes are what
// the client reports the receiver got.
func checkServerDoc(t *testing.T, s *iperf3json.Doc, d clientDoc) {
	t.Helper()
	st := s.Start.TestStart
	if s.Start.SystemInfo == "" || st == nil || len(s.Start.Connected) == 0 || s.Start.Timestamp == nil {
		t.Fatalf("server_output_json start lacks system_info, test_start, connected or timestamp: %+v", s.Start)
	}
	wantProto := "TCP"
	if d.Start.TestStart != nil {
		wantProto = d.Start.TestStart.Protocol
	}
	if st.Protocol != wantProto || st.NumStreams != 1 || st.Duration != 1 {
		t.Errorf("server test_start %+v, want %s, 1 stream, 1 s", *st, wantProto)
	}
	e := s.End
	if e.SumReceived == nil || e.SumSent == nil || e.CPU == nil {
		t.Fatalf("server_output_json end lacks sum_received, sum_sent or cpu_utilization_percent: %+v", e)
	}
	if e.SumReceived.Bytes != d.End.SumReceived.Bytes {
		t.Errorf("responder received %.0f bytes, the client says the receiver got %.0f", e.SumReceived.Bytes, d.End.SumReceived.Bytes)
	}
	c := e.CPU
	if c.HostTotal < 0 || c.HostUser < 0 || c.HostSystem < 0 || absDiff(c.HostTotal, c.HostUser+c.HostSystem) > 1e-6 {
		t.Errorf("host cpu %v total != user %v + system %v", c.HostTotal, c.HostUser, c.HostSystem)
	}
	if c.RemoteTotal <= 0 {
		t.Errorf("remote_total %v: want the client's CPU, > 0", c.RemoteTotal)
	}
	// Its intervals add up to what it received, bar a last partial
	// interval shorter than a tenth of a second, which iperf3 drops too.
	var inIntervals float64
	for _, iv := range s.Intervals {
		if !iv.Sum.IsOmitted() {
			inIntervals += iv.Sum.Bytes
		}
	}
	if len(s.Intervals) == 0 || inIntervals > e.SumReceived.Bytes*1.0001 || inIntervals < e.SumReceived.Bytes*0.8 {
		t.Errorf("responder's %d intervals carry %.0f bytes, its end.sum_received %.0f", len(s.Intervals), inIntervals, e.SumReceived.Bytes)
	}
	if wantProto == "TCP" && (e.SenderTCPCongestion == "" || e.ReceiverTCPCongestion == "") {
		t.Errorf("sender_tcp_congestion %q, receiver_tcp_congestion %q: want both named", e.SenderTCPCongestion, e.ReceiverTCPCongestion)
	}
}

func absDiff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestClientCarriesSocketOptions: `cnperf probe tcp --peer iperf3` carries
// -S, -w and -M as iperf3's client does: its own data sockets take them
// and the server is asked for them, so against cnperf's responder both
// ends' data carry the mark (watched on loopback as root).
func TestClientCarriesSocketOptions(t *testing.T) {
	addr := probetest.Start(t, iperf3wire.NewServer())
	_, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	var (
		done chan *probe.Result
		werr error
	)
	if os.Geteuid() == 0 {
		done = make(chan *probe.Result, 1)
		spec := probe.Spec{Kind: probe.KindWire, Target: "127.0.0.1", Duration: probe.Duration(3 * time.Second),
			Watch: &probe.WatchFlow{Proto: "tcp", Src: "127.0.0.1", Dst: "127.0.0.1", SrcPort: port}}
		go func() {
			res, err := wirewatch.Prober{}.Run(context.Background(), spec, probe.Env{})
			werr = err
			done <- res
		}()
		time.Sleep(200 * time.Millisecond)
	}
	tos := tosEF
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := iperf3wire.Run(ctx, probe.Spec{Kind: probe.KindTCP, Target: addr, Duration: probe.Duration(2 * time.Second),
		Reverse: true, TOS: &tos, WindowBytes: 256 << 10, MSS: 1000}, nil)
	if err != nil {
		t.Fatalf("--peer iperf3 with -S, -w, -M: %v", err)
	}
	if res.TOS != tosEF || res.ThroughputBps == nil || res.ThroughputBps.Receiver <= 0 {
		t.Fatalf("result tos %d, throughput %+v; want %d and data received", res.TOS, res.ThroughputBps, tosEF)
	}
	if done == nil {
		t.Log("not root: the marks on the wire are not watched")
		return
	}
	w := <-done
	if werr != nil {
		t.Fatalf("wire watch: %v", werr)
	}
	fwd, rev := w.WireDSCP.WireDirection, w.WireDSCP.Reverse
	if fwd.Outer == nil || *fwd.Outer != dscpEF || rev.Outer == nil || *rev.Outer != dscpEF {
		t.Errorf("on loopback: responder's packets DSCP %v (%d), client's %v (%d); want %d both ways", fwd.Outer, fwd.Packets, rev.Outer, rev.Packets, dscpEF)
	}
	t.Logf("EF both ways: %d packets from the responder, %d from the client", fwd.Packets, rev.Packets)
}
