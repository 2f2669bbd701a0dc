package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
)

// Server ports in namespace B.
const (
	cnperfPort      = 5201 // cnperf respond: TCP and UDP
	iperf3Port      = 5202
	sockperfUDPPort = 5203
	sockperfTCPPort = 5204
)

// bench runs one mode of the comparison.
type bench struct {
	ctx     context.Context // cancelled by SIGINT/SIGTERM
	o       options
	pair    *nettest.Pair
	mode    mode
	servers []*server

	// The rr servers, sampled beside their clients.
	cnperfServer, sockperfUDP, sockperfTCP *server
}

// mode says where the bench pins the clients and the servers of every
// tool alike: a CPU each, or -1 for none.
type mode struct {
	name      string // printed at the mode's start
	short     string // the table's mode column
	clientCPU int
	serverCPU int
	rrOnly    bool // only rr runs in this mode
}

// modes are run in this order: unpinned, as an agent runs on a node;
// pinned to two CPUs (the two-CPU placement by construction); and, for rr
// only, client and server sharing CPU 0 (the one-CPU placement by
// construction, like two pods on one core), so that each loop is compared
// in each placement (README.md, "How rr's CPU and placement are read").
var modes = []mode{
	{name: "unpinned", short: "unpinned", clientCPU: -1, serverCPU: -1},
	{name: "pinned (client CPU 0, server CPU 1)", short: "pinned", clientCPU: 0, serverCPU: 1},
	{name: "shared (client and server on CPU 0)", short: "shared", clientCPU: 0, serverCPU: 0, rrOnly: true},
}

// runs says whether test (tcp, udp or rr) runs in m under -only only.
func (m mode) runs(test, only string) bool {
	if only != "" && only != test {
		return false
	}
	return !m.rrOnly || test == "rr"
}

// runsAny says whether any test runs in m under -only only.
func (m mode) runsAny(only string) bool {
	return m.runs("tcp", only) || m.runs("udp", only) || m.runs("rr", only)
}

// server is a server process of one mode.
type server struct {
	cmd  *exec.Cmd
	tool string // the tool's executable (cmd may be taskset's)
}

// command returns name args, pinned to cpu with taskset unless cpu is -1.
// taskset executes the tool in place, so cmd's PID is the tool's.
func command(ctx context.Context, cpu int, name string, args ...string) *exec.Cmd {
	if cpu < 0 {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
}

// startServers starts the servers the mode's tests need, on the mode's
// server CPU.
func (b *bench) startServers() error {
	dst := b.pair.AddrB.String()
	start := func(name string, args ...string) (*server, error) {
		c := command(context.Background(), b.mode.serverCPU, name, args...)
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		if err := b.pair.B.Start(c); err != nil {
			return nil, fmt.Errorf("start %v: %w", c.Args, err)
		}
		s := &server{cmd: c, tool: name}
		b.servers = append(b.servers, s)
		return s, nil
	}
	var err error
	if b.cnperfServer, err = start(b.o.cnperf, "respond", "--listen", nettest.HostPort(b.pair.AddrB, cnperfPort), "--log-level", "warn"); err != nil {
		return err
	}
	ports := []int{cnperfPort}
	if b.mode.runs("tcp", b.o.only) || b.mode.runs("udp", b.o.only) {
		if _, err = start(b.o.iperf3, "-s", "-B", dst, "-p", strconv.Itoa(iperf3Port)); err != nil {
			return err
		}
		ports = append(ports, iperf3Port)
	}
	if b.mode.runs("rr", b.o.only) {
		if b.sockperfUDP, err = start("sockperf", "server", "-i", dst, "-p", strconv.Itoa(sockperfUDPPort)); err != nil {
			return err
		}
		if b.sockperfTCP, err = start("sockperf", "server", "--tcp", "-i", dst, "-p", strconv.Itoa(sockperfTCPPort)); err != nil {
			return err
		}
		ports = append(ports, sockperfTCPPort)
	}
	for _, port := range ports {
		if err := b.waitPort(port); err != nil {
			return err
		}
	}
	if b.sockperfUDP != nil {
		time.Sleep(200 * time.Millisecond) // sockperf's UDP server cannot be dialled to check
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
	for _, s := range b.servers {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	b.servers = nil
}

// client runs a client command in namespace A (on the mode's client CPU)
// and returns its stdout.
func (b *bench) client(timeout time.Duration, name string, args ...string) ([]byte, error) {
	out, _, err := b.clientWatched(timeout, nil, name, args...)
	return out, err
}

// clientWatched is client that, when server is not nil, samples the
// client and server processes while the client runs (watch) for an rr
// run's CPU per transaction.
func (b *bench) clientWatched(timeout time.Duration, server *server, name string, args ...string) ([]byte, watchResult, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	cmd := command(ctx, b.mode.clientCPU, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := b.pair.A.Start(cmd); err != nil {
		return nil, watchResult{}, err
	}
	var w watchResult
	watched := make(chan struct{})
	stopWatch, endWatch := context.WithCancel(context.Background())
	defer endWatch()
	if server != nil {
		spec := watchSpec{client: cmd.Process.Pid, server: server.cmd.Process.Pid,
			clientComm: commOf(name), serverComm: commOf(server.tool), rrTime: b.o.rrTime}
		go func() { w = watch(stopWatch, spec); close(watched) }()
	} else {
		close(watched)
	}
	err := cmd.Wait()
	endWatch()
	<-watched
	if err != nil {
		return out.Bytes(), w, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLine(errb.String()))
	}
	return out.Bytes(), w, nil
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
	ThroughputBps  struct{ Sender, Receiver float64 } `json:"throughput_bps"`
	CPUPct         struct{ Sender, Receiver float64 } `json:"cpu_pct"`
	LossPct        *float64                           `json:"loss_pct"`
	AppRTTms       struct{ P50 float64 }              `json:"app_rtt_ms"`
	TPS            float64                            `json:"transactions_per_s"`
	SendMode       string                             `json:"send_mode"`
	BurstDatagrams int                                `json:"burst_datagrams"`
	RecvMethod     string                             `json:"recv_method"`
}

func (b *bench) cnperf(timeout time.Duration, args ...string) (cnperfResult, error) {
	r, _, err := b.cnperfWatched(timeout, nil, args...)
	return r, err
}

// cnperfWatched is cnperf sampling the client and server (an rr run).
func (b *bench) cnperfWatched(timeout time.Duration, server *server, args ...string) (cnperfResult, watchResult, error) {
	out, w, err := b.clientWatched(timeout, server, b.o.cnperf, append([]string{"probe"}, append(args, "--json", "--log-level", "warn")...)...)
	if err != nil {
		return cnperfResult{}, w, err
	}
	var r cnperfResult
	if err := json.Unmarshal(out, &r); err != nil {
		return r, w, fmt.Errorf("cnperf %v: decode result: %w", args, err)
	}
	return r, w, nil
}

func (b *bench) cnperfTarget() string { return nettest.HostPort(b.pair.AddrB, cnperfPort) }

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
		CPU struct {
			HostTotal float64 `json:"host_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
	Error string `json:"error"`
}

func (b *bench) iperf3(timeout time.Duration, args ...string) (iperf3Result, error) {
	// The iperf3 server serves one test at a time and may still be closing
	// the previous one when the next client comes: retry a few times.
	for attempt := 0; ; attempt++ {
		out, err := b.client(timeout, b.o.iperf3, append([]string{"-c", b.pair.AddrB.String(), "-p", strconv.Itoa(iperf3Port), "--json"}, args...)...)
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

// sockperfResult is what one sockperf ping-pong run printed.
type sockperfResult struct {
	p50us float64 // full round trip
	tps   float64
}

// sockperf runs ping-pong at the maximum rate for the rr time with 64-byte
// messages and full round-trip figures.
func (b *bench) sockperf(tcp bool) (sockperfResult, watchResult, error) {
	port, srv := sockperfUDPPort, b.sockperfUDP
	args := []string{"ping-pong", "-i", b.pair.AddrB.String(), "-m", "64", "--mps=max", "--full-rtt",
		"-t", strconv.Itoa(max(1, int(b.o.rrTime.Seconds())))}
	if tcp {
		port, srv = sockperfTCPPort, b.sockperfTCP
		args = append(args, "--tcp")
	}
	args = append(args, "-p", strconv.Itoa(port))
	out, w, err := b.clientWatched(b.o.rrTime+30*time.Second, srv, "sockperf", args...)
	if err != nil {
		return sockperfResult{}, w, err
	}
	r, err := parseSockperf(out)
	return r, w, err
}

// parseSockperf reads the 50th percentile and the valid period's received
// messages and run time from sockperf ping-pong's output.
func parseSockperf(out []byte) (sockperfResult, error) {
	var r sockperfResult
	var runS, recv float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "percentile 50.000 ="); i >= 0 {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[i+len("percentile 50.000 ="):]), 64)
			if err != nil {
				return r, fmt.Errorf("sockperf: bad percentile line %q", line)
			}
			r.p50us = v
		}
		if strings.Contains(line, "[Valid Duration]") {
			for _, f := range strings.FieldsFunc(line, func(c rune) bool { return c == ';' || c == ' ' }) {
				k, v, ok := strings.Cut(f, "=")
				if !ok {
					continue
				}
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					continue
				}
				switch k {
				case "RunTime":
					runS = n
				case "ReceivedMessages":
					recv = n
				}
			}
		}
	}
	if r.p50us == 0 || runS == 0 {
		return r, fmt.Errorf("sockperf: no percentile or valid duration in its output")
	}
	r.tps = recv / runS
	return r, nil
}
