package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The cluster hold: -hold agents on sessions, held as a production
// cluster of that size would hold them: -hold-replicas `cnperf server`
// replicas on one throwaway PostgreSQL, the agents spread over
// -hold-sims simulator processes (sim.go), each dialing from its own
// loopback source address, agent i's session on replica i mod replicas.
// No process needs more connections than the 20,000 open-file hard limit
// allows. See docs/control-plane.md, "Scale".

// clusterFigures is what the cluster hold measured.
type clusterFigures struct {
	agents, replicas, sims  int
	held, offline           int   // the API's listing at the end
	rampMarks, falseOff     int   // reaper marks before and during the window
	simUp                   int64 // the simulators' own count of open sessions
	conns                   []int // established connections on each replica's port (the kernel's count)
	allUpAfter              time.Duration
	lost, failedOpen, kaErr int64
	kaN                     int
	ka                      []time.Duration // p50, p99, p99.9, max
	window                  time.Duration
	replicaCPU              []time.Duration
	pgCPU, simCPU           time.Duration
	rss, hwm                []int64
	pgPSS                   int64
	load0, load             string
	listErr                 error            // the listing failed: held unknown (-1)
	peakUp                  int64            // the most sessions up at a progress check (the simulators' count)
	peakAt                  time.Duration    // when
	peakRSS                 int64            // the replicas' RSS then
	reasons                 map[string]int64 // why sessions ended or failed to open (the simulators')
	disp                    *dispatchFigures // the matrix dispatch in the window (nil: none)
	answered, answerErr     int64            // tasks the simulators started and reported, and failed to
	periods                 map[string]int64 // open sessions by the keep-alive period asked of them (s), at the end
}

// sim is one simulator child.
type sim struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	done  chan struct{}
	first int
	count int
}

// ask sends a command and reads the answer.
func (s *sim) ask(cmd string) (simReport, error) {
	var r simReport
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		return r, fmt.Errorf("simulator %d: %s: %w", s.cmd.Process.Pid, cmd, err)
	}
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		return r, fmt.Errorf("simulator %d: %s: %w", s.cmd.Process.Pid, cmd, err)
	}
	return r, json.Unmarshal(line, &r)
}

// askAll asks every simulator at once.
func askAll(sims []*sim, cmd string) ([]simReport, error) {
	out := make([]simReport, len(sims))
	errs := make([]error, len(sims))
	var wg sync.WaitGroup
	for i, s := range sims {
		wg.Go(func() { out[i], errs[i] = s.ask(cmd) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// startSim starts simulator k; it exits when its stdin closes (this
// process ended, however) and is SIGKILLed if this process dies first.
func startSim(c config, dir string, k int, bases []string, first, count int) (*sim, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	errf, err := os.Create(fmt.Sprintf("%s/sim-%d.log", dir, k))
	if err != nil {
		return nil, err
	}
	defer errf.Close() // the child holds its own descriptor
	cmd := exec.Command(exe, "-sim-child", "-sim-servers", strings.Join(bases, ","),
		"-sim-src", fmt.Sprintf("127.0.0.%d", 2+k), "-sim-first", strconv.Itoa(first), "-sim-count", strconv.Itoa(count),
		"-hold-ramp", c.holdRamp.String())
	cmd.Stderr = errf
	// The load generator's heap is mostly its sessions' goroutines and
	// buffers, live the whole run: collect less often, so the CPU goes to
	// the servers measured (memory is plentiful; the servers run as
	// shipped).
	cmd.Env = append(os.Environ(), "GOGC=400")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start simulator %d: %w", k, err)
	}
	s := &sim{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), done: make(chan struct{}), first: first, count: count}
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s, nil
}

// stop closes the simulator's stdin and waits for it, killing it after
// 30 s.
func (s *sim) stop() {
	s.in.Close()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// runClusterHold holds c.hold agents on the cluster and prints the
// figures.
func runClusterHold(ctx context.Context, c config) (clusterFigures, error) {
	n, R, S := c.hold, c.holdReplicas, c.holdSims
	f := clusterFigures{agents: n, replicas: R, sims: S}
	load0, _ := os.ReadFile("/proc/loadavg")
	f.load0 = strings.TrimSpace(string(load0))
	dir, err := os.MkdirTemp("", "cnperf-serverbench-cluster-")
	if err != nil {
		return f, err
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Printf("cluster logs kept in %s\n", dir)
	}
	pg, err := startPostgres(ctx, c.pgScript)
	if err != nil {
		return f, err
	}
	defer func() {
		t := time.Now()
		pg.stop()
		fmt.Fprintf(os.Stderr, "serverbench: PostgreSQL stopped in %.1f s\n", time.Since(t).Seconds())
	}()
	var reps []*replica
	defer func() { stopAll("replicas", reps, func(r *replica) { r.stop() }) }()
	var bases []string
	for i := range R {
		r, err := startReplica(ctx, c, pg.dsn, dir, i, n+1000)
		if err != nil {
			return f, err
		}
		reps = append(reps, r)
		bases = append(bases, "http://"+r.addr)
	}
	for i, r := range reps {
		b := &bench{base: "http://" + r.addr, hbClient: &http.Client{Timeout: 10 * time.Second}}
		if err := b.waitHealthy(ctx, 60*time.Second); err != nil {
			return f, fmt.Errorf("replica %d did not come up: %w (log %s)", i, err, r.logPath)
		}
	}
	fmt.Printf("\n== cluster hold: %d agents on sessions, %d replicas on one PostgreSQL (%s), %d simulator processes from 127.0.0.2-%d, ramp %v\n",
		n, R, pg.dir, S, 1+S, c.holdRamp)
	var sims []*sim
	defer func() { stopAll("simulators", sims, (*sim).stop) }()
	for k := range S {
		first, last := k*n/S, (k+1)*n/S
		s, err := startSim(c, dir, k, bases, first, last-first)
		if err != nil {
			return f, err
		}
		sims = append(sims, s)
	}
	// The ramp, the warm-up, then up to -hold-settle more while sessions
	// are still opening; progress every 15 s.
	t0 := time.Now()
	minWait := c.holdRamp + c.warmup
	for {
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(15 * time.Second):
		}
		rs, err := askAll(sims, "status")
		if err != nil {
			return f, err
		}
		up, per := sumUp(rs, R)
		el := time.Since(t0)
		fmt.Printf("  %3.0f s: %d sessions up (per replica %v), load %s\n", el.Seconds(), up, per, loadavg())
		if up > f.peakUp {
			// The memory at the most sessions held, in case they do not
			// all stay up.
			f.peakUp, f.peakAt, f.peakRSS = up, el, 0
			for _, r := range reps {
				rss, _ := rssOf(r.pid)
				f.peakRSS += rss
			}
		}
		if up == int64(n) && f.allUpAfter == 0 {
			f.allUpAfter = el
		}
		if el >= minWait && (up == int64(n) || el >= minWait+c.holdSettle) {
			break
		}
	}
	f.rampMarks = countOfflineAll(reps)
	var disp *dispatcher
	var dwg sync.WaitGroup
	defer dwg.Wait()
	// Matrix dispatch starts -hold-dispatch-warmup before the window
	// (its rounds there are not counted): the first rounds meet each
	// replica's pooled database connections cold (a statement's first
	// use on a connection prepares it, one more round trip).
	stopAt := time.Now().Add(c.holdDispatchWarmup + c.holdMeasure)
	if c.holdPairs > 0 {
		if disp, err = newDispatcher(bases, n, c.holdPairs, c.holdSolo, c.holdRound); err != nil {
			return f, err
		}
		disp.from = time.Now().Add(c.holdDispatchWarmup)
	}
	dctx, stopDisp := context.WithDeadline(ctx, stopAt)
	defer stopDisp()
	if disp != nil {
		dwg.Go(func() { disp.run(ctx, dctx) })
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(time.Until(disp.from)):
		}
	}
	if _, err := askAll(sims, "measure"); err != nil {
		return f, err
	}
	simPids := func() (p []int) {
		for _, s := range sims {
			p = append(p, s.cmd.Process.Pid)
		}
		return p
	}()
	repCPU0 := make([]time.Duration, R)
	for i, r := range reps {
		repCPU0[i] = cpuTime(r.pid)
	}
	pgPids := pg.pids()
	pgCPU0, simCPU0 := cpuOf(pgPids), cpuOf(simPids)
	start := time.Now()
	// The window; the last matrix round is waited for after it (its
	// tasks' dispatch is measured, the CPU and memory are the window's).
	<-dctx.Done()
	if ctx.Err() != nil {
		return f, ctx.Err()
	}
	f.window = time.Since(start)
	for i, r := range reps {
		f.replicaCPU = append(f.replicaCPU, cpuTime(r.pid)-repCPU0[i])
		rss, hwm := rssOf(r.pid)
		f.rss, f.hwm = append(f.rss, rss), append(f.hwm, hwm)
	}
	f.pgCPU = cpuOf(pgPids) - pgCPU0 // backends started in the window are not counted
	f.simCPU = cpuOf(simPids) - simCPU0
	for _, p := range pg.pids() {
		f.pgPSS += pssOf(p)
	}
	f.load = loadavg()
	dwg.Wait()
	rs, err := askAll(sims, "report")
	if err != nil {
		return f, err
	}
	var rtts []time.Duration
	arrivals := map[string]int64{}
	for _, r := range rs {
		maps.Copy(arrivals, r.Arrivals)
		f.answered += r.Answered
		f.answerErr += r.AnswerErr
		f.simUp += r.Up
		f.lost += r.Lost
		f.failedOpen += r.FailedOpen
		f.kaErr += r.KAErrors
		for _, us := range r.RTTMicros {
			rtts = append(rtts, time.Duration(us)*time.Microsecond)
		}
	}
	f.kaN, f.ka = percentiles(rtts, 50, 99, 99.9, 100)
	if disp != nil {
		df := disp.figures(arrivals)
		f.disp = &df
	}
	f.reasons, f.periods = map[string]int64{}, map[string]int64{}
	for _, r := range rs {
		for k, v := range r.Periods {
			f.periods[k] += v
		}
		for k, v := range r.DownReasons {
			f.reasons[k] += v
		}
	}
	f.conns = established(reps)
	time.Sleep(2 * time.Second) // the flushers' last writes
	// 50,000 agents are a listing of about 20 MB from a loaded replica.
	b := &bench{base: bases[0], listTimeout: 2 * time.Minute}
	f.falseOff = countOfflineAll(reps) - f.rampMarks
	if f.held, f.offline, err = b.countAgents(ctx); err != nil {
		f.held, f.offline, f.listErr = -1, -1, err
	}
	f.print()
	return f, nil
}

func sumUp(rs []simReport, replicas int) (int64, []int64) {
	var up int64
	per := make([]int64, replicas)
	for _, r := range rs {
		up += r.Up
		for i, v := range r.UpPerServer {
			if i < replicas {
				per[i] += v
			}
		}
	}
	return up, per
}

func percentiles(d []time.Duration, ps ...float64) (int, []time.Duration) {
	slices.Sort(d)
	var out []time.Duration
	for _, p := range ps {
		if len(d) == 0 {
			out = append(out, 0)
			continue
		}
		out = append(out, d[int(p/100*float64(len(d)-1))])
	}
	return len(d), out
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// countOfflineAll counts the reaper's offline marks in every replica's
// log (the leader's reaper makes them; leadership may move).
func countOfflineAll(reps []*replica) int {
	n := 0
	for _, r := range reps {
		n += countOffline(r.logPath)
	}
	return n
}

// established counts the established TCP connections whose local port is
// each replica's listening port, from /proc/net/tcp: the kernel's count of
// the sessions each replica holds (plus the odd API call).
func established(reps []*replica) []int {
	ports := map[string]int{} // local address "0100007F:PORT" in hex → replica
	for i, r := range reps {
		_, p, _ := strings.Cut(r.addr, ":")
		port, _ := strconv.Atoi(p)
		ports[fmt.Sprintf("0100007F:%04X", port)] = i
	}
	out := make([]int, len(reps))
	fh, err := os.Open("/proc/net/tcp")
	if err != nil {
		return out
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "01" { // 01: ESTABLISHED
			continue
		}
		if i, ok := ports[fs[1]]; ok {
			out[i]++
		}
	}
	return out
}

// print writes the cluster hold's figures.
func (f clusterFigures) print() {
	if f.listErr != nil {
		fmt.Printf("agents held: UNKNOWN, the API's listing failed: %v\n", f.listErr)
	}
	fmt.Printf("agents held (online at the end, the API's listing): %d of %d (%d offline); the simulators count %d sessions open\n",
		f.held, f.agents, f.offline, f.simUp)
	if f.allUpAfter > 0 {
		fmt.Printf("all sessions up after:               %.0f s\n", f.allUpAfter.Seconds())
	}
	fmt.Printf("sessions per replica (kernel, established): %v\n", f.conns)
	fmt.Printf("keep-alive:                          %d answered (%.0f/s), %d errors, %d sessions lost, %d failed opens in the window\n",
		f.kaN, float64(f.kaN)/f.window.Seconds(), f.kaErr, f.lost, f.failedOpen)
	if len(f.reasons) > 0 {
		keys := slices.SortedFunc(maps.Keys(f.reasons), func(a, b string) int { return cmp.Compare(f.reasons[b], f.reasons[a]) })
		fmt.Printf("sessions ended or not opened, by reason (the whole run, most frequent first):\n")
		for _, k := range keys[:min(len(keys), 5)] {
			fmt.Printf("  %7d  %s\n", f.reasons[k], k)
		}
	}
	if len(f.periods) > 0 {
		keys := slices.SortedFunc(maps.Keys(f.periods), func(a, b string) int { return cmp.Compare(f.periods[b], f.periods[a]) })
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s s: %d", k, f.periods[k]))
		}
		fmt.Printf("keep-alive period asked (open sessions at the end): %s\n", strings.Join(parts, ", "))
	}
	fmt.Printf("keep-alive latency:                  p50 %s  p99 %s  p99.9 %s  max %s\n", ms(f.ka[0]), ms(f.ka[1]), ms(f.ka[2]), ms(f.ka[3]))
	fmt.Printf("false offline (reaper marks):        %d in the %.0f s window (%d during the ramp)\n", f.falseOff, f.window.Seconds(), f.rampMarks)
	if f.peakUp > 0 {
		fmt.Printf("at the most sessions up (%d, %.0f s in):  replicas' RSS %s, %.1f KB per session\n",
			f.peakUp, f.peakAt.Seconds(), mb(f.peakRSS), float64(f.peakRSS)/1e3/float64(f.peakUp))
	}
	if d := f.divisor(); d != f.agents {
		fmt.Printf("per-agent figures below divide by the %d sessions the replicas hold, not by %d\n", d, f.agents)
	}
	var cpu time.Duration
	var rss int64
	for i := range f.replicaCPU {
		cpu += f.replicaCPU[i]
		rss += f.rss[i]
		held := max(f.conns[i], 1)
		fmt.Printf("replica %d:                           %d sessions; RSS %s (peak %s), %.1f KB per agent; CPU %.1f s in the window, %.1f%% of a core, %.2f µs per agent per second\n",
			i, f.conns[i], mb(f.rss[i]), mb(f.hwm[i]), float64(f.rss[i])/1e3/float64(held),
			f.replicaCPU[i].Seconds(), 100*f.replicaCPU[i].Seconds()/f.window.Seconds(), f.replicaCPU[i].Seconds()/f.window.Seconds()/float64(held)*1e6)
	}
	fmt.Printf("replicas together:                   RSS %s, %.1f KB per agent; CPU %.1f s in the window, %.1f%% of a core, %.2f µs per agent per second\n",
		mb(rss), float64(rss)/1e3/float64(f.divisor()), cpu.Seconds(), 100*cpu.Seconds()/f.window.Seconds(), f.perAgent(cpu))
	fmt.Printf("PostgreSQL:                          PSS %s; CPU %.1f s in the window, %.1f%% of a core (%.2f µs per agent per second)\n",
		mb(f.pgPSS), f.pgCPU.Seconds(), 100*f.pgCPU.Seconds()/f.window.Seconds(), f.perAgent(f.pgCPU))
	fmt.Printf("cluster (replicas + PostgreSQL):     %s, %.1f KB per agent; %.2f µs CPU per agent per second\n",
		mb(rss+f.pgPSS), float64(rss+f.pgPSS)/1e3/float64(f.divisor()), f.perAgent(cpu+f.pgCPU))
	fmt.Printf("simulators:                          CPU %.1f%% of a core\n", 100*f.simCPU.Seconds()/f.window.Seconds())
	if d := f.disp; d != nil {
		fmt.Printf("matrix dispatch:                     %d rounds (runs of suite matrix; %d of them one pair alone) created after %d warm-up rounds (not counted), %d finished, %d failed; %d tasks, %d reached their agents (%.1f/s); %d answered with the warm-up's, %d answer errors\n",
			d.rounds, d.soloRounds, d.warm, d.done, d.failed, d.tasks, d.arrived, float64(d.arrived)/f.window.Seconds(), f.answered, f.answerErr)
		fmt.Printf("dispatch latency (created → agent):  p50 %s  p90 %s  p99 %s  max %s (the create call alone: p50 %s  p99 %s)\n",
			ms(d.lat[0]), ms(d.lat[1]), ms(d.lat[2]), ms(d.lat[3]), ms(d.create[0]), ms(d.create[1]))
		fmt.Printf("  of which:                          create request → claimed (dispatched_at) p50 %s  p99 %s; claimed → agent p50 %s  p99 %s\n",
			ms(d.toClaim[0]), ms(d.toClaim[1]), ms(d.toAgent[0]), ms(d.toAgent[1]))
		if d.soloRounds > 0 {
			fmt.Printf("one pair alone (a round in %d):       %d tasks, p50 %s  p99 %s (not in the figures above: one task's path, no round queued with it)\n",
				d.solo, d.soloArrived, ms(d.soloLat[0]), ms(d.soloLat[1]))
		}
		if d.lastErr != nil {
			fmt.Printf("matrix dispatch, last error:         %v\n", d.lastErr)
		}
	}
	fmt.Printf("machine load average:                %s at the start, %s at the end of the window\n", f.load0, f.load)
}

func (f clusterFigures) perAgent(cpu time.Duration) float64 {
	return cpu.Seconds() / f.window.Seconds() / float64(f.divisor()) * 1e6
}

// divisor is what per-agent figures divide by: the agents asked for, or
// the sessions the replicas hold (the kernel's count) when fewer are.
func (f clusterFigures) divisor() int {
	n := 0
	for _, c := range f.conns {
		n += c
	}
	if n > 0 && n < f.agents {
		return n
	}
	return max(f.agents, 1)
}

// checks names each of the hold's checks that failed: every agent
// held, no false offline mark, and (with matrix dispatch) every task
// created reaching its agent and every round finishing.
func (f clusterFigures) checks() []string {
	var bad []string
	if f.held != f.agents || f.offline != 0 {
		bad = append(bad, fmt.Sprintf("%d of %d agents online (%d offline)", f.held, f.agents, f.offline))
	}
	if f.falseOff != 0 {
		bad = append(bad, fmt.Sprintf("%d false offline marks", f.falseOff))
	}
	if d := f.disp; d != nil {
		if d.tasks == 0 || d.arrived != d.tasks {
			bad = append(bad, fmt.Sprintf("%d of %d dispatched tasks reached their agents", d.arrived, d.tasks))
		}
		if d.failed != 0 {
			bad = append(bad, fmt.Sprintf("%d matrix rounds failed (%v)", d.failed, d.lastErr))
		}
	}
	return bad
}

func (f clusterFigures) met() bool { return len(f.checks()) == 0 }

// summary is the hold's line in the targets.
func (f clusterFigures) summary() string {
	var rss int64
	var cpu time.Duration
	for i := range f.rss {
		rss += f.rss[i]
		cpu += f.replicaCPU[i]
	}
	s := fmt.Sprintf("%d agents held on sessions (%d replicas on PostgreSQL, %d simulators) for %.0f s: %d/%d online, %d false offline, keep-alive p99 %s; replicas' RSS %s (%.1f KB per agent; with PostgreSQL %.1f KB), %.2f µs CPU per agent per second (with PostgreSQL %.2f); load %s: %s",
		f.agents, f.replicas, f.sims, f.window.Seconds(), f.held, f.agents, f.falseOff, ms(f.ka[1]), mb(rss), float64(rss)/1e3/float64(f.divisor()),
		float64(rss+f.pgPSS)/1e3/float64(f.divisor()), f.perAgent(cpu), f.perAgent(cpu+f.pgCPU), f.load, verdict(f.met()))
	if d := f.disp; d != nil {
		n := d.arrived - d.soloArrived // the full rounds' tasks: what the targets judge
		s += fmt.Sprintf("\nmatrix dispatch while held: %d tasks of full rounds, p50 %s (target < 10 ms: %s), p99 %s (target < 100 ms: %s)",
			n, ms(d.lat[0]), verdict(n > 0 && d.lat[0] < 10*time.Millisecond), ms(d.lat[2]), verdict(n > 0 && d.lat[2] < 100*time.Millisecond))
		if d.soloRounds > 0 {
			s += fmt.Sprintf("; one pair alone: %d tasks, p50 %s", d.soloArrived, ms(d.soloLat[0]))
		}
	}
	return s
}

// stopAll stops every one of a kind of child process at once and says how
// long it took.
func stopAll[T any](what string, all []T, stop func(T)) {
	t := time.Now()
	var wg sync.WaitGroup
	for _, x := range all {
		wg.Go(func() { stop(x) })
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "serverbench: %s stopped in %.1f s\n", what, time.Since(t).Seconds())
}
