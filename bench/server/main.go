// Command server (serverbench) measures how many agents one cnperf server holds:
// it starts `cnperf server` on SQLite as a separate process and simulates
// N agents in two ways, one run each: agent sessions through the agent's
// own session client (client.HoldSession: a keep-alive every api.DefaultKeepalive, offers,
// acks, start and report frames), and the v1-style polling agent (a REST
// heartbeat per second each, a long poll held open each, start and report
// calls). It creates ping tasks between random agents during the
// measurement and prints, with the machine's load, the agents held,
// keep-alive (or heartbeat) latency, false offline marks, dispatch
// latency (task creation request sent → task in the agent's hands) and
// the server's CPU per agent per second; then it holds -hold sessions on
// a cluster (-hold-replicas servers on a throwaway PostgreSQL, the
// sessions spread over -hold-sims simulator processes: no process here
// may hold more than 20,000 sockets), dispatches matrix rounds over
// their sessions meanwhile, and prints their memory and dispatch latency. Targets (#12): keep-alive p99 < 100 ms and
// no false offline at 10,000 agents, dispatch p50 < 10 ms and p99 <
// 100 ms, at most 15 µs of server CPU per agent per second, 50,000 agents
// held.
//
// The files follow its concerns: main.go the flags, server.go the server
// under test, agents.go the simulated agents, measure.go the run and its
// latency recorders, print.go the figures and verdicts, hold.go and
// cluster.go the cluster hold and its PostgreSQL and replicas, sim.go a
// simulator process of the hold.
//
// It is a benchmark, not a test: run it with `make bench-server`, alone
// (the Makefile takes /tmp/cnperf-bench.lock).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const (
	userTok  = "bench-user"
	agentTok = "bench-agent"
)

// config holds the flags.
type config struct {
	bin      string
	agents   int
	ramp     time.Duration
	warmup   time.Duration
	measure  time.Duration
	taskRate float64
	wait     time.Duration
	keep     bool
	server   string
	cpuProf  string
	mode     string // both, sessions or poll
	hold     int    // agents held in the memory phase (sessions; 0: none)
	holdRamp time.Duration

	// The cluster hold (hold.go): replicas on PostgreSQL, simulators.
	holdReplicas       int
	holdSims           int
	holdMeasure        time.Duration
	holdSettle         time.Duration
	holdDispatchWarmup time.Duration
	holdPairs          int           // node pairs per matrix round during the window (0: no dispatch)
	holdRound          time.Duration // a round at most this often
	holdSolo           int           // every holdSolo-th round is one pair alone, measured apart (0: none)
	holdKA             time.Duration // the replicas' --session-keepalive (0: scaled)
	pgScript           string

	// A simulator child (sim.go), started by the cluster hold.
	simChild   bool
	simServers string
	simSrc     string
	simFirst   int
	simCount   int
}

func main() {
	var c config
	flag.StringVar(&c.bin, "cnperf", "bin/cnperf", "cnperf binary to run the server with")
	flag.IntVar(&c.agents, "agents", 10000, "simulated agents")
	flag.DurationVar(&c.ramp, "ramp", 20*time.Second, "time over which agents start")
	flag.DurationVar(&c.warmup, "warmup", 10*time.Second, "time after the ramp before measuring")
	flag.DurationVar(&c.measure, "measure", 60*time.Second, "measurement window")
	flag.Float64Var(&c.taskRate, "task-rate", 10, "tasks created per second during the measurement")
	flag.DurationVar(&c.wait, "poll-wait", 25*time.Second, "long-poll wait the agents ask for")
	flag.BoolVar(&c.keep, "keep", false, "keep the temp dir (database, server log)")
	flag.StringVar(&c.cpuProf, "cpuprofile", "", "write the simulated agents' CPU profile (measurement window) to this file")
	flag.StringVar(&c.mode, "mode", "both", "agents to simulate: sessions (the agent's session client), poll (the v1-style REST heartbeat a second and long poll), both, one after the other, or hold (the -hold phase alone)")
	flag.IntVar(&c.hold, "hold", 50000, "then hold this many agents' sessions and print the servers' memory (0: skip)")
	flag.DurationVar(&c.holdRamp, "hold-ramp", 300*time.Second, "time over which the held agents open their sessions")
	flag.IntVar(&c.holdReplicas, "hold-replicas", 4, "server replicas on one throwaway PostgreSQL holding the -hold agents (0: one server on SQLite, capped by the open-file limit); raised when the open-file limit needs more")
	flag.IntVar(&c.holdSims, "hold-sims", 4, "simulator processes holding the -hold agents' sessions, each from its own loopback address (127.0.0.2, ...); raised when the open-file limit or ephemeral ports need more")
	flag.DurationVar(&c.holdMeasure, "hold-measure", 30*time.Second, "measurement window of the hold")
	flag.DurationVar(&c.holdDispatchWarmup, "hold-dispatch-warmup", 20*time.Second, "matrix rounds dispatched before the hold's window, not counted")
	flag.DurationVar(&c.holdSettle, "hold-settle", 60*time.Second, "after the hold's ramp and warm-up, wait up to this long more for every session to open")
	flag.IntVar(&c.holdPairs, "hold-pairs", 50, "during the hold's window, create matrix rounds of this many disjoint node pairs through the API and measure their dispatch (0: none)")
	flag.DurationVar(&c.holdRound, "hold-round", time.Second, "start a matrix round at most this often (and only once the previous one finished)")
	flag.IntVar(&c.holdSolo, "hold-solo", 4, "make every Nth matrix round (N >= 2) one pair alone and measure its task apart: one task's path without a round's queue (0: none)")
	flag.DurationVar(&c.holdKA, "hold-keepalive", 0, "the replicas' --session-keepalive (0: each scales the period with the sessions it holds)")
	flag.StringVar(&c.pgScript, "pg-script", "scripts/pg-test.sh", "the throwaway PostgreSQL helper (start/stop) of the cluster hold")
	flag.BoolVar(&c.simChild, "sim-child", false, "internal: run as a simulator of the cluster hold (commands on stdin)")
	flag.StringVar(&c.simServers, "sim-servers", "", "internal (simulator): the replicas' URLs, comma-separated")
	flag.StringVar(&c.simSrc, "sim-src", "127.0.0.2", "internal (simulator): the loopback source address to dial from")
	flag.IntVar(&c.simFirst, "sim-first", 0, "internal (simulator): the first agent's index")
	flag.IntVar(&c.simCount, "sim-count", 0, "internal (simulator): how many agents")
	flag.StringVar(&c.server, "server", "", "benchmark this running server (tokens bench-user and bench-agent) instead of starting one")
	flag.Parse()
	if c.simChild {
		if err := runSimChild(c); err != nil {
			fmt.Fprintln(os.Stderr, "serverbench simulator:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "serverbench:", err)
		os.Exit(1)
	}
}

// raiseNoFile lifts the open-file limit (10,000 held long polls need
// 10,000 sockets on each side); the server child inherits it.
func raiseNoFile(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Max < need {
		rl.Max = need // works as root
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, err
		}
	}
	return rl.Cur, nil
}
