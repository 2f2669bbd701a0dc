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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

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

// bench is one run's shared state.
type bench struct {
	c        config
	base     string
	hbClient *http.Client // heartbeats, starts, reports, task creation
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
	if limit < uint64(c.agents+2048) {
		return fmt.Errorf("open-file limit %d is too low for %d agents (need about %d; run as root)", limit, c.agents, c.agents+2048)
	}
	dir, err := os.MkdirTemp("", "cnperf-serverbench-")
	if err != nil {
		return err
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	srvCtx, srvCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer srvCancel()
	cmd := exec.CommandContext(srvCtx, c.bin, "server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "bench.db"), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "CNPERF_USER_TOKEN="+userTok, "CNPERF_AGENT_TOKEN="+agentTok)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s server: %w", c.bin, err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- cmd.Wait() }()
	defer func() {
		srvCancel()
		<-srvDone
	}()

	b := &bench{
		c:    c,
		base: "http://" + addr,
		hbClient: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 90 * time.Second}},
		lpClient: &http.Client{Timeout: c.wait + 20*time.Second, Transport: &http.Transport{
			MaxIdleConns: c.agents + 100, MaxIdleConnsPerHost: c.agents + 100, IdleConnTimeout: 90 * time.Second}},
		created: map[string]time.Time{},
		arrived: map[string]time.Time{},
	}
	if err := b.waitHealthy(ctx, 20*time.Second); err != nil {
		return fmt.Errorf("server did not come up: %w (log %s)", err, logPath)
	}
	fmt.Printf("cnperf server benchmark: %d simulated agents, 1 Hz heartbeats, long polls of %v held, SQLite; server pid %d on %s\n",
		c.agents, c.wait, cmd.Process.Pid, addr)
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
	held0, _, err := b.countAgents(ctx)
	if err != nil {
		return err
	}
	offlineBefore := countOffline(logPath)
	fmt.Printf("after ramp and warm-up: %d agents online; measuring...\n", held0)
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

// countOffline counts the reaper's "agent offline" log lines.
func countOffline(path string) int {
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
	data, err := b.do(ctx, b.hbClient, "GET", "/api/v2/agents?all=1", userTok, nil)
	if err != nil {
		return 0, 0, err
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
		_, err := b.do(ctx, b.hbClient, "POST", "/api/v2/agent/heartbeat", agentTok, hb)
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
