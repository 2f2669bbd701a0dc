// Command probes (probebench) compares cnperf's probes with the single-purpose tools
// users compare them with, side by side in one run, over a veth between two
// throwaway namespaces (`make bench-probes`), and prints the table of
// issue 17 with ratios and met/MISSED:
//
//   - TCP, 1 stream and -P N (N = CPUs): receiver throughput, cnperf tcp vs
//     iperf3 (target: ratio ≥ 1.0);
//   - UDP, 1400-byte payloads paced at 10M, 100M and 1G: the sender's CPU,
//     cnperf udp vs iperf3 -u (target: ≤ iperf3's, with < 0.1 % loss, and
//     at 100M at most 9 datagrams handed to the kernel at once);
//   - request/response, 64 bytes, UDP and TCP: application round trip p50
//     and transactions per second, cnperf rr vs sockperf ping-pong --full-rtt
//     (targets: p50 ≤ sockperf's, transactions/s ≥ sockperf's).
//
// rr also gives both tools' client and server CPU per transaction and, per
// run, where the kernel placed the two ends (same CPU or two), read from
// /proc while the run goes (watch.go, placement.go).
//
// Everything runs unpinned (as on a node, nothing pinned) and pinned
// (client on CPU 0, servers on CPU 1, the same for every tool); rr runs a
// third time "shared", client and server both on CPU 0. Within a mode,
// runs alternate tool by tool and the table holds medians. The machine is
// shared and noisy: every run is printed, not only the medians, and the
// load average at the start, at each mode and at the end.
// Needs root, iperf3, sockperf and taskset (scripts/install-test-deps.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
)

type options struct {
	cnperf  string
	iperf3  string
	runs    int
	tcpTime time.Duration
	udpTime time.Duration
	rrTime  time.Duration
	streams int
	only    string
}

func main() {
	var o options
	flag.StringVar(&o.cnperf, "cnperf", "bin/cnperf", "path to the cnperf binary")
	flag.StringVar(&o.iperf3, "iperf3", "iperf3", "the iperf3 to compare with (Debian 12's is 3.12; a path names another build)")
	flag.IntVar(&o.runs, "runs", 5, "runs per tool, test and mode (medians are printed)")
	flag.DurationVar(&o.tcpTime, "tcp-time", 5*time.Second, "duration of each TCP run")
	flag.DurationVar(&o.udpTime, "udp-time", 3*time.Second, "duration of each UDP run")
	flag.DurationVar(&o.rrTime, "rr-time", 3*time.Second, "duration of each request/response run")
	flag.IntVar(&o.streams, "streams", runtime.NumCPU(), "TCP parallel streams of the -P row")
	flag.StringVar(&o.only, "only", "", "run only tcp, udp or rr")
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
	for _, tool := range []string{o.iperf3, "sockperf", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run `make test-deps` first", tool)
		}
	}
	switch o.only {
	case "", "tcp", "udp", "rr":
	default:
		return fmt.Errorf("-only %q: want tcp, udp or rr", o.only)
	}
	pair, cleanup, err := nettest.MakePair()
	defer func() {
		if cerr := cleanup(); cerr != nil {
			fmt.Fprintln(os.Stderr, "probebench:", "cleanup:", cerr)
		}
	}()
	if err != nil {
		return err
	}
	fmt.Printf("probebench: veth between namespaces %s and %s; %d runs per tool, test and mode, alternating; %d CPUs; %s\n",
		pair.A.Name, pair.B.Name, o.runs, runtime.NumCPU(), loadNow())
	fmt.Printf("probebench: machine: %s\n", machine())
	fmt.Printf("probebench: %s\n", firstLine(ctx, o.cnperf, "version"))
	fmt.Printf("probebench: %s\n", firstLine(ctx, o.iperf3, "--version"))
	var rows []row
	for _, m := range modes {
		if !m.runsAny(o.only) {
			continue
		}
		b := &bench{o: o, pair: pair, ctx: ctx, mode: m}
		fmt.Printf("\n== %s == %s\n", m.name, loadNow())
		r, err := b.runMode()
		b.stopServers()
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	fmt.Printf("\nprobebench: done %s\n\n", loadNow())
	printTable(os.Stdout, rows)
	return nil
}

// loadNow says when and under what load (the 1, 5 and 15 minute load
// averages of /proc/loadavg) a part of the run took place: the machine is
// shared, and the ratios are read with its load beside them.
func loadNow() string {
	at := time.Now().UTC().Format("15:04:05 UTC")
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return "at " + at + ", load average unknown"
	}
	return fmt.Sprintf("at %s, load average %s %s %s", at, f[0], f[1], f[2])
}

// machine names the CPU model and the kernel release: the same code gave
// half again as much TCP throughput on one 2-vCPU machine as on another
// (README.md), so a quoted table carries the machine it came from.
func machine() string {
	cpu := "CPU model unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "kernel unknown"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "kernel " + strings.TrimSpace(string(b))
	}
	return cpu + ", " + kernel
}

// firstLine is the first line a tool prints for args (its version, so
// that a quoted table carries the commit and the iperf3 measured), or why
// it printed none.
func firstLine(ctx context.Context, tool string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, args...).Output()
	if err != nil {
		return fmt.Sprintf("%s %s: %v", tool, strings.Join(args, " "), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return fmt.Sprintf("%s (%s)", line, tool)
}
