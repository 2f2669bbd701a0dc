package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
)

// The measurement: one run's shared state, its recorders, and run, which
// ramps the agents up, measures for the window and prints.

// recorder collects latencies.
type recorder struct {
	mu sync.Mutex // guards d
	d  []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

func (r *recorder) pct(ps ...float64) (n int, out []time.Duration) {
	r.mu.Lock()
	d := slices.Clone(r.d)
	r.mu.Unlock()
	slices.Sort(d)
	for _, p := range ps {
		if len(d) == 0 {
			out = append(out, 0)
			continue
		}
		i := int(p / 100 * float64(len(d)-1))
		out = append(out, d[i])
	}
	return len(d), out
}

// bench is one run's shared state.
type bench struct {
	c        config
	mode     string // "sessions" or "poll"
	agents   int
	base     string
	lean     *leanClient    // heartbeats
	hbClient *http.Client   // starts, reports, task creation, listings
	lpClient *http.Client   // long polls: one connection each
	sessCl   *client.Client // sessions: the agent's client, one connection per session

	listTimeout time.Duration // one try of the agents' listing (30 s when 0)

	measuring atomic.Bool
	hbLat     recorder // heartbeat (poll) or keep-alive (sessions) latency in the window
	hbSent    atomic.Int64
	hbErr     atomic.Int64
	hbLate    atomic.Int64 // beats that could not be sent on time (the agent fell behind)
	fetchErr  atomic.Int64
	otherLat  recorder // start and report calls in the window
	dispatch  recorder

	sessUp   atomic.Int64 // sessions open now
	sessDown atomic.Int64 // sessions that ended or failed to open in the window

	mu      sync.Mutex           // guards created and arrived
	created map[string]time.Time // task id → create request sent, until the task arrives
	arrived map[string]time.Time // task id → arrival, when it came before the create answer
	got     atomic.Int64
}

// figures is what one phase measured.
type figures struct {
	mode                 string
	agents               int
	held, offline        int
	falseOffline         int
	window               time.Duration
	srvCPU, benchCPU     time.Duration
	load                 string
	hbN                  int
	hb                   []time.Duration // p50, p99, p99.9, max
	hbErr, hbLate, downs int64
	dispN, lost          int
	disp                 []time.Duration // p50, p90, p99, max
	rss, hwm             int64
	otherN               int
	other                []time.Duration // p50, p99
	fetchErr             int64
	tasksPerS            float64
	perAgentS            time.Duration // server CPU per agent per second
}

func run(ctx context.Context, c config) error {
	switch c.mode {
	case "both", "sessions", "poll", "hold":
	default:
		return fmt.Errorf("-mode %q: want both, sessions, poll or hold", c.mode)
	}
	cluster := c.hold > 0 && c.holdReplicas > 0 && c.mode != "poll"
	if c.holdSolo < 0 || c.holdSolo == 1 {
		// 1 would make every round one pair alone: no full round left
		// to judge the targets by.
		return fmt.Errorf("-hold-solo %d: want 0 (no lone pairs) or N >= 2 (every Nth round one pair alone)", c.holdSolo)
	}
	if cluster && (c.holdSims < 1 || c.holdSims > 250) {
		return fmt.Errorf("-hold-sims %d: want 1 to 250 simulator processes", c.holdSims)
	}
	most := c.agents
	if c.mode != "poll" && !cluster {
		most = max(most, c.hold)
	}
	limit, err := raiseNoFile(uint64(3*most + 8192))
	if err != nil {
		return fmt.Errorf("raise the open-file limit: %w", err)
	}
	if need := uint64(c.agents + leanConns + 2048); limit < need && c.mode != "hold" {
		return fmt.Errorf("open-file limit %d is too low for %d agents (need about %d; run as root)", limit, c.agents, need)
	}
	// The server holds a socket per session, and so does this process:
	// a hard limit below -hold (a sandbox without CAP_SYS_RESOURCE) caps
	// the agents one process can hold, whatever the server's design. The
	// cluster hold spreads them over processes that each fit.
	asked := c.hold
	if fit := (int(limit) - 2048) / 1000 * 1000; cluster {
		if err := c.splitHold(fit, limit); err != nil {
			return err
		}
	} else if c.hold > fit {
		c.hold = fit
		fmt.Printf("note: the open-file limit is %d (hard; raising it needs CAP_SYS_RESOURCE): the server and this process can each hold about %d connections, so %d agents are held instead of %d\n",
			limit, fit, c.hold, asked)
	}
	load0, _ := os.ReadFile("/proc/loadavg")
	if c.mode != "hold" {
		fmt.Printf("cnperf server benchmark: %d simulated agents (mode %s), SQLite; machine load average at start: %s", c.agents, c.mode, load0)
		fmt.Printf("ramp %v, warm-up %v, measuring %v, %.1f tasks/s\n", c.ramp, c.warmup, c.measure, c.taskRate)
	} else {
		fmt.Printf("cnperf server benchmark: the %d-agent hold alone; machine load average at start: %s", c.hold, load0)
	}
	var phases []figures
	for _, m := range []string{"sessions", "poll"} {
		if c.mode != "both" && c.mode != m {
			continue
		}
		f, err := runPhase(ctx, c, m, c.agents, c.ramp, c.warmup, c.measure)
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		phases = append(phases, f)
	}
	var hold *figures
	var ch *clusterFigures
	switch {
	case cluster:
		f, err := runClusterHold(ctx, c)
		if err != nil {
			return fmt.Errorf("hold %d on %d replicas: %w", c.hold, c.holdReplicas, err)
		}
		ch = &f
	case c.hold > 0 && c.mode != "poll":
		f, err := runPhase(ctx, c, "sessions", c.hold, c.holdRamp, c.warmup, 15*time.Second)
		if err != nil {
			return fmt.Errorf("hold %d: %w", c.hold, err)
		}
		hold = &f
	}
	printSummary(c, phases, hold, asked)
	if ch != nil {
		fmt.Println(ch.summary())
		if bad := ch.checks(); len(bad) > 0 {
			return fmt.Errorf("the hold failed its checks: %s", strings.Join(bad, "; "))
		}
	}
	return nil
}

// runPhase starts a server, simulates n agents of the mode, measures and
// prints the phase's figures.
func runPhase(ctx context.Context, c config, mode string, n int, ramp, warmup, measure time.Duration) (figures, error) {
	addr, logPath, srvPid, stopServer, err := startServer(ctx, c, n)
	if err != nil {
		return figures{}, err
	}
	defer stopServer()
	b := &bench{
		c:      c,
		mode:   mode,
		agents: n,
		base:   "http://" + addr,
		hbClient: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 90 * time.Second}},
		lpClient: &http.Client{Timeout: c.wait + 20*time.Second, Transport: &http.Transport{
			MaxIdleConns: n + 100, MaxIdleConnsPerHost: n + 100, IdleConnTimeout: 90 * time.Second}},
		created: map[string]time.Time{},
		arrived: map[string]time.Time{},
		lean:    &leanClient{addr: addr, pool: make(chan *leanConn, leanConns), slots: make(chan struct{}, leanConns)},
	}
	if b.sessCl, err = sessionClient(b.base); err != nil {
		return figures{}, err
	}
	if err := b.waitHealthy(ctx, 20*time.Second); err != nil {
		return figures{}, fmt.Errorf("server did not come up: %w (log %s)", err, logPath)
	}
	fmt.Printf("\n== %s: %d agents, server on %s\n", mode, n, addr)

	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if mode == "sessions" {
			wg.Go(func() { b.sessionAgent(agentsCtx, i, ramp) })
		} else {
			wg.Go(func() { b.agent(agentsCtx, i, ramp) })
		}
	}
	defer func() {
		stopAgents()
		wg.Wait()
	}()

	select {
	case <-ctx.Done():
		return figures{}, ctx.Err()
	case <-time.After(ramp + warmup):
	}
	held0, off0, err := b.countAgents(ctx)
	if err != nil {
		return figures{}, err
	}
	offlineBefore := countOffline(logPath)
	if logPath == "" {
		offlineBefore = off0
	}
	fmt.Printf("after ramp and warm-up: %d agents online; measuring...\n", held0)
	if c.cpuProf != "" && mode == "sessions" && n == c.agents {
		f, err := os.Create(c.cpuProf)
		if err != nil {
			return figures{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return figures{}, err
		}
		defer pprof.StopCPUProfile()
	}
	srvCPU0, benchCPU0 := cpuTime(srvPid), cpuTime(os.Getpid())
	b.measuring.Store(true)
	t0 := time.Now()
	tasksCtx, stopTasks := context.WithTimeout(ctx, measure)
	var twg sync.WaitGroup
	twg.Go(func() { b.createTasks(tasksCtx) })
	<-tasksCtx.Done()
	stopTasks()
	twg.Wait()
	window := time.Since(t0)
	b.measuring.Store(false)
	srvCPU, benchCPU := cpuTime(srvPid)-srvCPU0, cpuTime(os.Getpid())-benchCPU0
	load, _ := os.ReadFile("/proc/loadavg")
	rss, hwm := rssOf(srvPid)
	if ctx.Err() != nil {
		return figures{}, ctx.Err()
	}
	// Let the last tasks arrive.
	time.Sleep(2 * time.Second)
	held, offline, err := b.countAgents(ctx)
	if err != nil {
		return figures{}, err
	}
	falseOffline := countOffline(logPath) - offlineBefore
	if logPath == "" {
		falseOffline = offline - offlineBefore // agents offline now that were not before
	}
	f := figures{mode: mode, agents: n, held: held, offline: offline, falseOffline: falseOffline, window: window,
		srvCPU: srvCPU, benchCPU: benchCPU, load: strings.TrimSpace(string(load)), rss: rss, hwm: hwm,
		hbErr: b.hbErr.Load(), hbLate: b.hbLate.Load(), downs: b.sessDown.Load(), fetchErr: b.fetchErr.Load()}
	f.hbN, f.hb = b.hbLat.pct(50, 99, 99.9, 100)
	f.dispN, f.disp = b.dispatch.pct(50, 90, 99, 100)
	f.otherN, f.other = b.otherLat.pct(50, 99)
	b.mu.Lock()
	f.lost = len(b.created)
	b.mu.Unlock()
	f.tasksPerS = float64(f.dispN) / window.Seconds()
	if srvPid != 0 && n > 0 {
		f.perAgentS = time.Duration(float64(srvCPU) / window.Seconds() / float64(n))
	}
	f.print()
	return f, nil
}
