package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/procfs"
)

// The cluster of the 50,000-agent hold: a throwaway PostgreSQL (the
// tests' scripts/pg-test.sh) and server replicas on it, each a child
// process that dies with this one.

// pgState is the helper's state file for the bench's PostgreSQL: its
// own, so a `make test` in the same checkout keeps its cluster, and a
// bench killed outright has its cluster stopped by the next bench's start
// (the helper stops the cluster a state file names before it starts one).
const pgState = "/tmp/cnperf-serverbench-pg.state"

// postgres is a running throwaway PostgreSQL.
type postgres struct {
	script string
	dsn    string
	dir    string // the cluster's directory (its socket, data/)
}

// startPostgres starts the cluster with the helper and returns it; stop
// it with stop, also on failure.
func startPostgres(ctx context.Context, script string) (*postgres, error) {
	abs, err := filepath.Abs(script)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return nil, fmt.Errorf("PostgreSQL helper %s: not found (run from the repository's root, or set -pg-script)", script)
	}
	p := &postgres{script: abs}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, abs, "start")
	cmd.Env = append(os.Environ(), "CNPERF_PG_STATE="+pgState)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("start PostgreSQL (%s start): %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	p.dsn = strings.TrimSpace(string(out))
	u, err := url.Parse(p.dsn)
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("PostgreSQL helper printed %q: %w", p.dsn, err)
	}
	p.dir = u.Query().Get("host")
	// A few more connections than the helper's 200 are not needed: each
	// replica pools at most 16 plus its LISTEN connection.
	return p, nil
}

// stop stops the cluster and removes its directory.
func (p *postgres) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.script, "stop")
	cmd.Env = append(os.Environ(), "CNPERF_PG_STATE="+pgState)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "serverbench: stop PostgreSQL: %v: %s\n", err, out)
	}
}

// pids returns the postmaster's pid and its children's (the backends,
// the writer, the WAL writer...).
func (p *postgres) pids() []int {
	b, err := os.ReadFile(filepath.Join(p.dir, "data", "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil
	}
	out := []int{pm}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppidOf(pid) == pm {
			out = append(out, pid)
		}
	}
	return out
}

// ppidOf returns a process's parent pid (0 when unknown).
func ppidOf(pid int) int {
	f, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	n, _ := procfs.Field(f, procfs.Ppid)
	return int(n)
}

// pssOf returns a process's proportional set size in bytes (shared pages
// divided among their sharers, so PostgreSQL's shared buffers count once
// over its processes; 0 when unknown).
func pssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			var kb int64
			fmt.Sscan(strings.TrimPrefix(line, "Pss:"), &kb)
			return kb << 10
		}
	}
	return 0
}

// cpuOf sums the CPU time of processes.
func cpuOf(pids []int) time.Duration {
	var d time.Duration
	for _, p := range pids {
		d += cpuTime(p)
	}
	return d
}

// replica is one `cnperf server` of the cluster.
type replica struct {
	addr    string
	logPath string
	pid     int
	stop    func()
}

// startReplica runs `cnperf server` on the cluster's database; it dies
// with this process (SIGKILL on its death), and stop ends it with SIGTERM.
func startReplica(ctx context.Context, c config, dsn, dir string, idx, maxAgents int) (*replica, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := &replica{addr: addr, logPath: filepath.Join(dir, fmt.Sprintf("replica-%d.log", idx))}
	logf, err := os.Create(r.logPath)
	if err != nil {
		return nil, err
	}
	srvCtx, srvCancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(srvCtx, c.bin, "server", "--listen", addr, "--db", dsn, "--log-level", "warn",
		"--max-agents", strconv.Itoa(maxAgents), "--session-keepalive", c.holdKA.String(),
		"--plain-http", "--trust-agent-addrs") // loopback, simulated agents: TLS and their addresses are not what is measured
	cmd.Env = append(os.Environ(), "CNPERF_USER_TOKEN="+userTok, "CNPERF_AGENT_TOKEN="+agentTok)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		srvCancel()
		logf.Close()
		return nil, fmt.Errorf("start %s server (replica %d): %w", c.bin, idx, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r.pid = cmd.Process.Pid
	r.stop = func() {
		srvCancel()
		<-done
		logf.Close()
	}
	return r, nil
}

// pgMaxConns is the throwaway PostgreSQL's max_connections
// (scripts/pg-test.sh); a replica opens at most replicaPGConns.
const (
	pgMaxConns     = 200
	replicaPGConns = 16 + 1 // the store's pool and the LISTEN connection
)

// portsPerAddr is about how many ephemeral ports one source address has
// (net.ipv4.ip_local_port_range, 32768-60999 by default).
const portsPerAddr = 28000

// splitHold raises -hold-replicas and -hold-sims until no process holds
// more connections than 60 % of fit (the open-file limit less a margin:
// a session that breaks and opens again holds two descriptors for a
// while, and a burst of them must not run a process out) and no
// simulator more than one source address's ephemeral ports, and refuses
// a split PostgreSQL's connections cannot serve.
func (c *config) splitHold(fit int, limit uint64) error {
	if fit < 1000 {
		return fmt.Errorf("open-file limit %d: too low to hold sessions", limit)
	}
	fit = fit * 6 / 10
	need := func(per int) int { return (c.hold + per - 1) / per }
	if r := need(fit); c.holdReplicas < r {
		fmt.Printf("note: %d replicas instead of %d: the open-file limit (%d) lets one process hold about %d connections\n", r, c.holdReplicas, limit, fit)
		c.holdReplicas = r
	}
	if s := need(min(fit, portsPerAddr)); c.holdSims < s {
		fmt.Printf("note: %d simulators instead of %d: one holds at most %d connections (open-file limit %d, ~%d ephemeral ports a source address)\n",
			s, c.holdSims, min(fit, portsPerAddr), limit, portsPerAddr)
		c.holdSims = s
	}
	if c.holdSims > 250 {
		return fmt.Errorf("-hold %d needs %d simulators, above the 250 source addresses the bench uses", c.hold, c.holdSims)
	}
	if n := c.holdReplicas*replicaPGConns + 10; n > pgMaxConns {
		return fmt.Errorf("-hold-replicas %d: up to %d PostgreSQL connections, above the throwaway cluster's max_connections %d", c.holdReplicas, n, pgMaxConns)
	}
	return nil
}
