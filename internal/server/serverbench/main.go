// Command serverbench measures how many agents one cnperf server holds:
// it starts `cnperf server` on SQLite as a separate process, simulates N
// agents speaking the real HTTP API (a heartbeat per second each, a long
// poll held open each, start and report calls for the tasks they get),
// creates ping tasks between random agents during the measurement, and
// prints the agents held, heartbeat latency percentiles, false offline
// marks, and dispatch latency (task creation request sent → task in the
// agent's hands). Targets: 10,000 agents at 1 Hz with p99 < 100 ms and no
// false offline; dispatch p50 < 50 ms.
//
// It is a benchmark, not a test: run it with `make bench-server`, alone
// (the Makefile takes /tmp/cnperf-bench.lock).
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
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// leanConns bounds the heartbeat connections the simulated agents share.
const leanConns = 1024

const (
	userTok  = "bench-user"
	agentTok = "bench-agent"
)

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
}

func main() {
	var c config
	flag.StringVar(&c.bin, "cnperf", "bin/cnperf", "cnperf binary to run the server with")
	flag.IntVar(&c.agents, "agents", 10000, "simulated agents")
	flag.DurationVar(&c.ramp, "ramp", 20*time.Second, "time over which agents start")
	flag.DurationVar(&c.warmup, "warmup", 10*time.Second, "time after the ramp before measuring")
	flag.DurationVar(&c.measure, "measure", 60*time.Second, "measurement window")
	flag.Float64Var(&c.taskRate, "task-rate", 5, "tasks created per second during the measurement")
	flag.DurationVar(&c.wait, "poll-wait", 25*time.Second, "long-poll wait the agents ask for")
	flag.BoolVar(&c.keep, "keep", false, "keep the temp dir (database, server log)")
	flag.StringVar(&c.cpuProf, "cpuprofile", "", "write the simulated agents' CPU profile (measurement window) to this file")
	flag.StringVar(&c.server, "server", "", "benchmark this running server (tokens bench-user and bench-agent) instead of starting one")
	flag.Parse()
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

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

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

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// leanClient sends heartbeats over a pool of persistent HTTP/1.1
// connections with pre-built requests: the simulated agents' side costs a
// fraction of net/http's client, so the machine's CPU goes to the server
// being measured.
type leanClient struct {
	addr  string
	pool  chan *leanConn // idle connections
	slots chan struct{}  // a token per open connection (bounds them)
}

type leanConn struct {
	c  net.Conn
	br *bufio.Reader
}

// post sends one request and returns the status code; the body is read
// and dropped.
func (l *leanClient) post(path string, body []byte) (int, error) {
	var lc *leanConn
	select {
	case lc = <-l.pool:
	default:
		// No idle connection: open one if under the bound, else wait for
		// one to come back (the wait counts in the latency).
		select {
		case lc = <-l.pool:
		case l.slots <- struct{}{}:
			c, err := net.DialTimeout("tcp", l.addr, 5*time.Second)
			if err != nil {
				<-l.slots
				return 0, err
			}
			lc = &leanConn{c: c, br: bufio.NewReaderSize(c, 4096)}
		}
	}
	drop := func() { lc.c.Close(); <-l.slots }
	req := make([]byte, 0, 256+len(body))
	req = fmt.Appendf(req, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, l.addr, agentTok, len(body))
	req = append(req, body...)
	_ = lc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := lc.c.Write(req); err != nil {
		drop()
		return 0, err
	}
	resp, err := http.ReadResponse(lc.br, nil)
	if err != nil {
		drop()
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		drop()
		return resp.StatusCode, err
	}
	l.pool <- lc // never blocks: the pool holds as many as slots allow
	return resp.StatusCode, nil
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

	n, p := b.hbLat.pct(50, 99, 99.9, 100)
	on, op := b.otherLat.pct(50, 99)
	dn, dp := b.dispatch.pct(50, 90, 99, 100)
	b.mu.Lock()
	lost := len(b.created)
	b.mu.Unlock()
	rate := float64(n) / window.Seconds()
	fmt.Println()
	fmt.Printf("agents held (online at the end):     %d of %d (%d offline)\n", held, c.agents, offline)
	fmt.Printf("heartbeats in window:                %d answered (%.0f/s), %d errors, %d late ticks\n", n, rate, b.hbErr.Load(), b.hbLate.Load())
	fmt.Printf("heartbeat latency:                   p50 %s  p99 %s  p99.9 %s  max %s\n", ms(p[0]), ms(p[1]), ms(p[2]), ms(p[3]))
	fmt.Printf("start/report latency:                p50 %s  p99 %s  (n=%d)\n", ms(op[0]), ms(op[1]), on)
	fmt.Printf("false offline (reaper marks):        %d\n", falseOffline)
	fmt.Printf("long-poll errors:                    %d\n", b.fetchErr.Load())
	if srvPid != 0 {
		perBeat := time.Duration(0)
		if n > 0 {
			perBeat = srvCPU / time.Duration(n)
		}
		fmt.Printf("CPU in window:                       server %.0f%% of a core (%v per answered heartbeat, all its work included), simulated agents %.0f%%\n",
			100*srvCPU.Seconds()/window.Seconds(), perBeat.Round(time.Microsecond), 100*benchCPU.Seconds()/window.Seconds())
	}
	fmt.Printf("machine load average at the end:     %s", load)
	fmt.Printf("dispatch latency (create → agent):   p50 %s  p90 %s  p99 %s  max %s  (n=%d, %d never arrived)\n", ms(dp[0]), ms(dp[1]), ms(dp[2]), ms(dp[3]), dn, lost)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("targets: %d agents held %s; heartbeat p99 < 100 ms %s; no false offline %s; dispatch p50 < 50 ms %s\n",
		c.agents, verdict(held == c.agents), verdict(p[1] < 100*time.Millisecond), verdict(falseOffline == 0), verdict(dn > 0 && dp[0] < 50*time.Millisecond))
	return nil
}

// startServer runs `cnperf server` on SQLite in a temp dir, or uses
// c.server. It returns the address, the server's log file ("" for an
// outside server) and a stop function.
func startServer(ctx context.Context, c config) (addr, logPath string, pid int, stop func(), err error) {
	if c.server != "" {
		u, err := url.Parse(c.server)
		if err != nil || u.Host == "" {
			return "", "", 0, nil, fmt.Errorf("-server %q: want http://HOST:PORT", c.server)
		}
		return u.Host, "", 0, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "cnperf-serverbench-")
	if err != nil {
		return "", "", 0, nil, err
	}
	cleanup := func() {
		if !c.keep {
			os.RemoveAll(dir)
		}
	}
	addr, err = freeAddr()
	if err != nil {
		cleanup()
		return "", "", 0, nil, err
	}
	logPath = filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		cleanup()
		return "", "", 0, nil, err
	}
	srvCtx, srvCancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(srvCtx, c.bin, "server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "bench.db"), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "CNPERF_USER_TOKEN="+userTok, "CNPERF_AGENT_TOKEN="+agentTok)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		srvCancel()
		logf.Close()
		cleanup()
		return "", "", 0, nil, fmt.Errorf("start %s server: %w", c.bin, err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- cmd.Wait() }()
	stop = func() {
		srvCancel()
		<-srvDone
		logf.Close()
		cleanup()
	}
	return addr, logPath, cmd.Process.Pid, stop, nil
}

func (b *bench) waitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := b.hbClient.Get(b.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cpuTime returns the user+system CPU time process pid has used (0 when
// unknown).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the ")" closing the command name: state is field 3;
	// utime and stime are fields 14 and 15, in clock ticks (100 Hz).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// countOffline counts the reaper's "agent offline" log lines.
func countOffline(path string) int {
	if path == "" {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="agent offline"`) {
			n++
		}
	}
	return n
}

func (b *bench) do(ctx context.Context, cl *http.Client, method, path, token string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, data)
	}
	return data, nil
}

// countAgents returns how many agents the server lists online, and
// offline.
func (b *bench) countAgents(ctx context.Context) (online, offline int, err error) {
	// A listing of 10,000 agents is a few MB: give it time, and a second
	// try, on a loaded machine.
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cl := &http.Client{Timeout: 30 * time.Second}
	data, err := b.do(lctx, cl, "GET", "/api/v2/agents?all=1", userTok, nil)
	if err != nil && lctx.Err() == nil {
		data, err = b.do(lctx, cl, "GET", "/api/v2/agents?all=1", userTok, nil)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list agents: %w", err)
	}
	var as []api.Agent
	if err := json.Unmarshal(data, &as); err != nil {
		return 0, 0, err
	}
	for _, a := range as {
		if a.Status == "offline" {
			offline++
		} else {
			online++
		}
	}
	return online, offline, nil
}

func uid(i int) string { return fmt.Sprintf("bench-%05d", i) }

func podIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256) }

// agent simulates one agent: heartbeats at 1 Hz and a long poll, from a
// random phase within the ramp.
func (b *bench) agent(ctx context.Context, i int) {
	hb, _ := json.Marshal(api.Heartbeat{PodName: "bench-pod-" + fmt.Sprint(i), PodNamespace: "bench", PodUID: uid(i), PodIP: podIP(i),
		NodeName: fmt.Sprintf("node-%d", i/20), NodeIP: podIP(i), ResponderAddr: podIP(i) + ":5201", Version: "bench"})
	delay := time.Duration(float64(b.c.ramp) * float64(i) / float64(b.c.agents))
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	first := make(chan struct{})
	wg.Go(func() {
		select {
		case <-first:
		case <-ctx.Done():
			return
		}
		b.poll(ctx, i)
	})
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev time.Time
	for n := 0; ; n++ {
		start := time.Now()
		if !prev.IsZero() && start.Sub(prev) > 1500*time.Millisecond && b.measuring.Load() {
			b.hbLate.Add(1) // a beat more than 0.5 s late: the agent fell behind
		}
		prev = start
		code, err := b.lean.post("/api/v2/agent/heartbeat", hb)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("heartbeat: HTTP %d", code)
		}
		if ctx.Err() != nil {
			return
		}
		d := time.Since(start)
		if b.measuring.Load() {
			if err != nil {
				b.hbErr.Add(1)
			} else {
				b.hbLat.add(d)
			}
		}
		if n == 0 && err == nil {
			close(first)
		} else if n == 0 {
			n = -1 // retry registration
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll long-polls for tasks; each task is started and reported at once.
func (b *bench) poll(ctx context.Context, i int) {
	q := url.Values{"pod_uid": {uid(i)}, "wait": {b.c.wait.String()}}
	path := "/api/v2/agent/tasks?" + q.Encode()
	for ctx.Err() == nil {
		data, err := b.do(ctx, b.lpClient, "GET", path, agentTok, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.fetchErr.Add(1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Millisecond):
			}
			continue
		}
		got := time.Now()
		var fr api.FetchReply
		if err := json.Unmarshal(data, &fr); err != nil {
			b.fetchErr.Add(1)
			continue
		}
		for _, t := range fr.Tasks {
			b.mu.Lock()
			created, ok := b.created[t.TaskID]
			delete(b.created, t.TaskID)
			if !ok {
				b.arrived[t.TaskID] = got
			}
			b.mu.Unlock()
			if ok {
				b.dispatch.add(got.Sub(created))
			}
			b.got.Add(1)
			b.finishTask(ctx, i, t.TaskID)
		}
	}
}

func (b *bench) finishTask(ctx context.Context, i int, taskID string) {
	start, _ := json.Marshal(api.StartRequest{PodUID: uid(i)})
	t0 := time.Now()
	_, err := b.do(ctx, b.hbClient, "POST", "/api/v2/agent/tasks/"+taskID+"/start", agentTok, start)
	if err == nil && b.measuring.Load() {
		b.otherLat.add(time.Since(t0))
	}
	rep, _ := json.Marshal(api.Report{TaskID: taskID, PodUID: uid(i), ReportID: "r-" + taskID, State: api.StateSucceeded, TaskResult: "simulated"})
	t0 = time.Now()
	_, err = b.do(ctx, b.hbClient, "POST", "/api/v2/agent/tasks/"+taskID+"/report", agentTok, rep)
	if err == nil && b.measuring.Load() {
		b.otherLat.add(time.Since(t0))
	}
}

// createTasks creates one ping task between two random agents at the
// configured rate, through the seed's v1 API.
func (b *bench) createTasks(ctx context.Context) {
	every := time.Duration(float64(time.Second) / b.c.taskRate)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		src := rand.IntN(b.c.agents)
		dst := (src + 1 + rand.IntN(b.c.agents-1)) % b.c.agents
		body, _ := json.Marshal([]api.TaskCreate{{SrcPodUID: uid(src), DstPodUID: uid(dst), TaskParam: "-c 1", TaskType: "ping"}})
		sent := time.Now()
		data, err := b.do(ctx, b.hbClient, "POST", "/api/v1/external/task/create", userTok, body)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintln(os.Stderr, "create task:", err)
			}
			continue
		}
		var env struct {
			Data []string `json:"data"`
		}
		if json.Unmarshal(data, &env) != nil || len(env.Data) != 1 {
			continue
		}
		id := env.Data[0]
		b.mu.Lock()
		if got, ok := b.arrived[id]; ok {
			delete(b.arrived, id)
			b.dispatch.add(got.Sub(sent))
		} else {
			b.created[id] = sent
		}
		b.mu.Unlock()
	}
}
