// Command probebench compares cnperf's probes with their references, side
// by side in one run, over a veth pair between two throwaway namespaces
// (`make bench-probes`). It prints medians and ratios; it is a benchmark,
// not a test, because this machine is shared and noisy:
//
//   - TCP, 1 stream: cnperf tcp vs iperf3, receiver throughput (target ≥ 1.0);
//   - UDP, 1400-byte payloads: the highest rate each reaches with < 0.1 %
//     loss at the receiver, found by the same search (target ≥ 5×);
//   - UDP request/response, one every 2 ms for both: cnperf rr median
//     rtt_ms vs ping's median on the same path (target within 10 µs).
//
// The client runs pinned to CPU 0 in namespace A and the server to CPU 1 in
// namespace B, the same for both tools; runs alternate tool by tool.
// Needs root, iperf3, ping and taskset.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
)

type options struct {
	cnperf   string
	runs     int
	tcpTime  time.Duration
	udpTime  time.Duration
	lossPct  float64
	rrCount  int
	skipUDP  bool
	udpSteps int
}

func main() {
	var o options
	flag.StringVar(&o.cnperf, "cnperf", "bin/cnperf", "path to the cnperf binary")
	flag.IntVar(&o.runs, "runs", 5, "runs per tool and test")
	flag.DurationVar(&o.tcpTime, "tcp-time", 5*time.Second, "duration of each TCP run")
	flag.DurationVar(&o.udpTime, "udp-time", 2*time.Second, "duration of each UDP trial")
	flag.Float64Var(&o.lossPct, "loss", 0.1, "UDP loss threshold in percent")
	flag.IntVar(&o.rrCount, "rr-count", 500, "request/response transactions per rr run, and echoes per ping run (both 2 ms apart)")
	flag.BoolVar(&o.skipUDP, "skip-udp", false, "skip the UDP rate search")
	flag.IntVar(&o.udpSteps, "udp-steps", 7, "bisection steps of the UDP rate search")
	flag.Parse()
	// SIGINT/SIGTERM end the clients; run's defers then stop the servers
	// and delete the namespaces.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "probebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if reason := nettest.Unavailable(); reason != "" {
		return errors.New(reason)
	}
	for _, tool := range []string{"iperf3", "ping", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run `make test-deps` first", tool)
		}
	}
	pair, cleanup, err := nettest.MakePair()
	defer func() {
		if cerr := cleanup(); cerr != nil {
			fmt.Fprintln(os.Stderr, "probebench: cleanup:", cerr)
		}
	}()
	if err != nil {
		return err
	}
	b := &bench{o: o, pair: pair, ctx: ctx}
	defer b.stopServers()
	if err := b.startServers(); err != nil {
		return err
	}

	fmt.Printf("probebench: veth between namespaces %s and %s, client on CPU 0, server on CPU 1, %d runs each\n\n",
		pair.A.Name, pair.B.Name, o.runs)

	var cnTCP, ipTCP []float64
	for i := 0; i < o.runs; i++ {
		v, err := b.cnperfTCP()
		if err != nil {
			return err
		}
		cnTCP = append(cnTCP, v)
		v, err = b.iperf3TCP()
		if err != nil {
			return err
		}
		ipTCP = append(ipTCP, v)
		fmt.Printf("  tcp run %d: cnperf %.2f Gbit/s, iperf3 %.2f Gbit/s\n", i+1, cnTCP[i]/1e9, ipTCP[i]/1e9)
	}

	var cnUDP, ipUDP []float64
	if !o.skipUDP {
		for i := 0; i < o.runs; i++ {
			v, err := b.search(b.cnperfUDP)
			if err != nil {
				return err
			}
			cnUDP = append(cnUDP, v)
			v, err = b.search(b.iperf3UDP)
			if err != nil {
				return err
			}
			ipUDP = append(ipUDP, v)
			fmt.Printf("  udp run %d: cnperf %.2f Gbit/s, iperf3 %.2f Gbit/s (highest rate with < %.2g %% loss)\n",
				i+1, cnUDP[i]/1e9, ipUDP[i]/1e9, o.lossPct)
		}
	}

	var cnRR, pingRR []float64
	for i := 0; i < o.runs; i++ {
		v, err := b.cnperfRR()
		if err != nil {
			return err
		}
		cnRR = append(cnRR, v)
		v, err = b.pingRTT()
		if err != nil {
			return err
		}
		pingRR = append(pingRR, v)
		fmt.Printf("  rr run %d: cnperf udp rr p50 %.1f µs, ping median %.1f µs\n", i+1, cnRR[i]*1e3, pingRR[i]*1e3)
	}

	fmt.Println()
	fmt.Printf("%-38s %14s %14s %10s %s\n", "test", "cnperf", "reference", "ratio", "target")
	tcpRatio := median(cnTCP) / median(ipTCP)
	fmt.Printf("%-38s %10.2f Gb/s %10.2f Gb/s %10.2f %s\n", "TCP 1 stream (receiver)", median(cnTCP)/1e9, median(ipTCP)/1e9, tcpRatio, verdict(tcpRatio >= 1.0, "≥ 1.0"))
	if !o.skipUDP {
		udpRatio := median(cnUDP) / median(ipUDP)
		fmt.Printf("%-38s %10.2f Gb/s %10.2f Gb/s %10.2f %s\n", fmt.Sprintf("UDP 1400 B, max rate < %.2g%% loss", o.lossPct), median(cnUDP)/1e9, median(ipUDP)/1e9, udpRatio, verdict(udpRatio >= 5, "≥ 5"))
	}
	diff := (median(cnRR) - median(pingRR)) * 1e3
	fmt.Printf("%-38s %12.1f µs %12.1f µs %+8.1f µs %s\n", "UDP rr p50 RTT vs ping median", median(cnRR)*1e3, median(pingRR)*1e3, diff, verdict(math.Abs(diff) <= 10, "within 10 µs"))
	return nil
}

func verdict(ok bool, target string) string {
	if ok {
		return target + " ok"
	}
	return target + " MISSED"
}

type bench struct {
	ctx     context.Context // cancelled by SIGINT/SIGTERM
	o       options
	pair    *nettest.Pair
	servers []*exec.Cmd
}

const (
	cnperfPort = 5201
	iperf3Port = 5202
)

// pinned returns a command pinned to cpu with taskset.
func pinned(ctx context.Context, cpu int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
}

func (b *bench) startServers() error {
	dst := b.pair.AddrB.String()
	resp := pinned(context.Background(), 1, b.o.cnperf, "respond", "--listen", nettest.HostPort(b.pair.AddrB, cnperfPort), "--log-level", "warn")
	ip := pinned(context.Background(), 1, "iperf3", "-s", "-B", dst, "-p", strconv.Itoa(iperf3Port))
	for _, c := range []*exec.Cmd{resp, ip} {
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		if err := b.pair.B.Start(c); err != nil {
			return fmt.Errorf("start %v: %w", c.Args, err)
		}
		b.servers = append(b.servers, c)
	}
	// Wait until both accept connections.
	for _, port := range []int{cnperfPort, iperf3Port} {
		if err := b.waitPort(port); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) waitPort(port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		err := b.pair.A.Do(func() error {
			c, err := net.DialTimeout("tcp", nettest.HostPort(b.pair.AddrB, port), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("server on port %d not ready within 10s", port)
}

func (b *bench) stopServers() {
	for _, c := range b.servers {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

// client runs a pinned client command in namespace A and returns stdout.
func (b *bench) client(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	cmd := pinned(ctx, 0, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := b.pair.A.Start(cmd); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLine(errb.String()))
	}
	return out.Bytes(), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// cnperfResult is the part of cnperf's JSON result the benchmark reads.
type cnperfResult struct {
	ThroughputBps struct{ Sender, Receiver float64 } `json:"throughput_bps"`
	LossPct       *float64                           `json:"loss_pct"`
	RTTms         struct{ P50 float64 }              `json:"rtt_ms"`
}

func (b *bench) cnperf(timeout time.Duration, args ...string) (cnperfResult, error) {
	out, err := b.client(timeout, b.o.cnperf, append([]string{"probe"}, append(args, "--json", "--log-level", "warn")...)...)
	if err != nil {
		return cnperfResult{}, err
	}
	var r cnperfResult
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("cnperf %v: decode result: %w", args, err)
	}
	return r, nil
}

func (b *bench) cnperfTCP() (float64, error) {
	r, err := b.cnperf(b.o.tcpTime+20*time.Second, "tcp", "--to", nettest.HostPort(b.pair.AddrB, cnperfPort), "-t", b.o.tcpTime.String())
	return r.ThroughputBps.Receiver, err
}

// iperf3Result is the part of iperf3 --json the benchmark reads.
type iperf3Result struct {
	End struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			LostPercent   float64 `json:"lost_percent"`
		} `json:"sum"`
	} `json:"end"`
	Error string `json:"error"`
}

func (b *bench) iperf3(timeout time.Duration, args ...string) (iperf3Result, error) {
	// The iperf3 server serves one test at a time and may still be closing
	// the previous one when the next client comes: retry a few times.
	for attempt := 0; ; attempt++ {
		out, err := b.client(timeout, "iperf3", append([]string{"-c", b.pair.AddrB.String(), "-p", strconv.Itoa(iperf3Port), "--json"}, args...)...)
		var r iperf3Result
		if jerr := json.Unmarshal(out, &r); jerr != nil && err == nil {
			err = fmt.Errorf("iperf3: decode: %w", jerr)
		}
		if r.Error != "" {
			err = fmt.Errorf("iperf3: %s", r.Error)
		}
		if err != nil && strings.Contains(r.Error, "server is busy") && attempt < 10 && b.ctx.Err() == nil {
			time.Sleep(time.Second)
			continue
		}
		return r, err
	}
}

func (b *bench) iperf3TCP() (float64, error) {
	r, err := b.iperf3(b.o.tcpTime+20*time.Second, "-t", strconv.Itoa(int(b.o.tcpTime.Seconds())))
	return r.End.SumReceived.BitsPerSecond, err
}

// udpTrial sends at rate for the trial time and returns the receiver's
// throughput and loss.
type udpTrial func(rate float64) (rx, lossPct float64, err error)

func (b *bench) cnperfUDP(rate float64) (float64, float64, error) {
	r, err := b.cnperf(b.o.udpTime+20*time.Second, "udp", "--to", nettest.HostPort(b.pair.AddrB, cnperfPort),
		"-t", b.o.udpTime.String(), "-l", "1400", "-b", strconv.FormatFloat(rate, 'f', 0, 64))
	if err != nil {
		return 0, 0, err
	}
	if r.LossPct == nil {
		return 0, 0, errors.New("cnperf udp result has no loss_pct")
	}
	return r.ThroughputBps.Receiver, *r.LossPct, nil
}

func (b *bench) iperf3UDP(rate float64) (float64, float64, error) {
	// -w asks for socket buffers as large as the system allows (cnperf's
	// are 32 MiB), so that iperf3's loss is not merely its default buffer
	// overflowing; iperf3 refuses a size the kernel caps, so the request
	// is net.core.rmem_max/wmem_max at most (cnperf, as root, forces its
	// size past them).
	r, err := b.iperf3(b.o.udpTime+20*time.Second, "-u", "-l", "1400", "-w", strconv.Itoa(iperf3Window()),
		"-b", strconv.FormatFloat(rate, 'f', 0, 64), "-t", strconv.Itoa(int(math.Ceil(b.o.udpTime.Seconds()))))
	return r.End.Sum.BitsPerSecond, r.End.Sum.LostPercent, err
}

// iperf3Window returns the largest socket buffer iperf3 may ask for here:
// 32 MiB, or less when net.core.rmem_max or wmem_max is smaller.
func iperf3Window() int {
	w := 32 << 20
	for _, f := range []string{"/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 && v < w {
			w = v
		}
	}
	return w
}

// search finds the highest receiver throughput a tool sustains with loss
// below the threshold. A trial at a target rate passes only when the loss
// is below the threshold and the receiver got at least 95 % of the target
// (a sender that cannot reach a rate does not pass it by losing nothing).
// It doubles from 500 Mbit/s until a trial fails, then bisects between the
// last passing and the first failing target. The figure reported is the
// best receiver throughput measured in a passing trial, never a target.
// Both tools get the same search.
func (b *bench) search(trial udpTrial) (float64, error) {
	good, bad, best := 0.0, 0.0, 0.0
	pass := func(rate float64) (bool, error) {
		rx, loss, err := trial(rate)
		if err != nil {
			return false, err
		}
		ok := loss < b.o.lossPct && rx >= 0.95*rate
		if ok && rx > best {
			best = rx
		}
		return ok, nil
	}
	for rate := 500e6; rate <= 128e9; rate *= 2 {
		ok, err := pass(rate)
		if err != nil {
			return 0, err
		}
		if !ok {
			bad = rate
			break
		}
		good = rate
	}
	if bad == 0 {
		return best, nil
	}
	for i := 0; i < b.o.udpSteps; i++ {
		mid := (good + bad) / 2
		ok, err := pass(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			good = mid
		} else {
			bad = mid
		}
	}
	return best, nil
}

// rrCount is how many transactions (cnperf) and echoes (ping) one rr run
// makes; both are spaced 2 ms apart, so the two see the path the same way
// (back-to-back transactions find caches and CPUs warmer than echoes
// every 2 ms do).
func (b *bench) rrCount() int { return max(b.o.rrCount, 20) }

func (b *bench) cnperfRR() (float64, error) {
	r, err := b.cnperf(60*time.Second, "rr", "--proto", "udp", "--to", nettest.HostPort(b.pair.AddrB, cnperfPort),
		"-c", strconv.Itoa(b.rrCount()), "-i", "2ms")
	return r.RTTms.P50, err
}

// pingRTT returns the median of ping's per-reply times in ms.
func (b *bench) pingRTT() (float64, error) {
	out, err := b.client(60*time.Second, "ping", "-n", "-c", strconv.Itoa(b.rrCount()), "-i", "0.002", b.pair.AddrB.String())
	if err != nil {
		return 0, err
	}
	var rtts []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, " time=")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+len(" time="):])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("ping: bad time in %q", line)
		}
		rtts = append(rtts, v)
	}
	if len(rtts) == 0 {
		return 0, errors.New("ping: no replies")
	}
	return median(rtts), nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
