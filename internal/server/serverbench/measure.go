package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
	base     string
	lean     *leanClient  // heartbeats
	hbClient *http.Client // starts, reports, task creation, listings
	lpClient *http.Client // long polls: one connection each

	measuring atomic.Bool
	hbLat     recorder // heartbeat latency in the window
	hbSent    atomic.Int64
	hbErr     atomic.Int64
	hbLate    atomic.Int64 // beats that could not be sent on time (the agent fell behind)
	fetchErr  atomic.Int64
	otherLat  recorder // start and report calls in the window
	dispatch  recorder

	mu      sync.Mutex           // guards created and arrived
	created map[string]time.Time // task id → create request sent, until the task arrives
	arrived map[string]time.Time // task id → arrival, when it came before the create answer
	got     atomic.Int64
}

func run(ctx context.Context, c config) error {
	limit, err := raiseNoFile(uint64(3*c.agents + 4096))
	if err != nil {
		return fmt.Errorf("raise the open-file limit: %w", err)
	}
	if need := uint64(c.agents + leanConns + 2048); limit < need {
		return fmt.Errorf("open-file limit %d is too low for %d agents (need about %d; run as root)", limit, c.agents, need)
	}
	addr, logPath, srvPid, stopServer, err := startServer(ctx, c)
	if err != nil {
		return err
	}
	defer stopServer()

	b := &bench{
		c:    c,
		base: "http://" + addr,
		hbClient: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 90 * time.Second}},
		lpClient: &http.Client{Timeout: c.wait + 20*time.Second, Transport: &http.Transport{
			MaxIdleConns: c.agents + 100, MaxIdleConnsPerHost: c.agents + 100, IdleConnTimeout: 90 * time.Second}},
		created: map[string]time.Time{},
		arrived: map[string]time.Time{},
		lean:    &leanClient{addr: addr, pool: make(chan *leanConn, leanConns), slots: make(chan struct{}, leanConns)},
	}
	if err := b.waitHealthy(ctx, 20*time.Second); err != nil {
		return fmt.Errorf("server did not come up: %w (log %s)", err, logPath)
	}
	fmt.Printf("cnperf server benchmark: %d simulated agents, 1 Hz heartbeats, long polls of %v held, SQLite; server on %s\n",
		c.agents, c.wait, addr)
	fmt.Printf("ramp %v, warm-up %v, measuring %v, %.1f tasks/s\n", c.ramp, c.warmup, c.measure, c.taskRate)

	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < c.agents; i++ {
		wg.Go(func() { b.agent(agentsCtx, i) })
	}
	defer func() {
		stopAgents()
		wg.Wait()
	}()

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.ramp + c.warmup):
	}
	held0, off0, err := b.countAgents(ctx)
	if err != nil {
		return err
	}
	offlineBefore := countOffline(logPath)
	if logPath == "" {
		offlineBefore = off0
	}
	fmt.Printf("after ramp and warm-up: %d agents online; measuring...\n", held0)
	if c.cpuProf != "" {
		f, err := os.Create(c.cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	srvCPU0, benchCPU0 := cpuTime(srvPid), cpuTime(os.Getpid())
	b.measuring.Store(true)
	t0 := time.Now()
	tasksCtx, stopTasks := context.WithTimeout(ctx, c.measure)
	var twg sync.WaitGroup
	twg.Go(func() { b.createTasks(tasksCtx) })
	<-tasksCtx.Done()
	stopTasks()
	twg.Wait()
	window := time.Since(t0)
	b.measuring.Store(false)
	srvCPU, benchCPU := cpuTime(srvPid)-srvCPU0, cpuTime(os.Getpid())-benchCPU0
	load, _ := os.ReadFile("/proc/loadavg")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Let the last tasks arrive.
	time.Sleep(2 * time.Second)
	held, offline, err := b.countAgents(ctx)
	if err != nil {
		return err
	}
	falseOffline := countOffline(logPath) - offlineBefore
	if logPath == "" {
		falseOffline = offline - offlineBefore // agents offline now that were not before
	}

	b.print(outcome{
		held: held, offline: offline, falseOffline: falseOffline, window: window,
		srvPid: srvPid, srvCPU: srvCPU, benchCPU: benchCPU, load: load,
	})
	return nil
}
