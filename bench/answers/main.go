// Command answers (answerbench) checks that a run with large tool outputs stays
// readable with bounded server memory (issue 11 part 4): it starts `cnperf
// server` on SQLite as its own process, lets two simulated agents take a
// run of -tasks ping tasks and report each with a raw output of -size
// bytes (1,000 x 8 MB by default: 8 GB stored), then reads the run back
// through the API (the run with all its task pages, every raw output on
// its own), the CLI (`cnperf task list --run`, `cnperf task raw`) and the
// dashboard's run page, while sampling the server's resident memory
// (VmRSS, and VmHWM at the end) from /proc. It prints the peak per phase
// and says whether the target (under -max-rss, 300 MB) was met.
//
// It is a benchmark, not a test (it writes and reads gigabytes): run it
// with `make bench-answers` (the Makefile takes /tmp/cnperf-bench.lock);
// `make bench-answers BENCH_ANSWERS_FLAGS='-tasks 50'` for a short one.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

const (
	userTok  = "answers-user"
	agentTok = "answers-agent"
)

type config struct {
	bin      string
	tasks    int
	size     int
	parallel int
	maxRSS   int64 // bytes
	keep     bool
}

func main() {
	var c config
	var maxMB int64
	flag.StringVar(&c.bin, "cnperf", "bin/cnperf", "cnperf binary to run the server and the CLI with")
	flag.IntVar(&c.tasks, "tasks", 1000, "tasks in the run")
	flag.IntVar(&c.size, "size", 8_000_000, "bytes of raw output per task")
	flag.IntVar(&c.parallel, "parallel", 4, "reports and raw reads in flight at once")
	flag.Int64Var(&maxMB, "max-rss", 300, "target: the server's peak RSS stays under this many MB")
	flag.BoolVar(&c.keep, "keep", false, "keep the temp dir (database, server log)")
	flag.Parse()
	c.maxRSS = maxMB << 20
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "answerbench:", err)
		os.Exit(1)
	}
}

// rssSampler polls a process's VmRSS every 50 ms and keeps the peak of the
// current phase.
type rssSampler struct {
	pid  int
	peak atomic.Int64
}

func (s *rssSampler) run(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if v, err := procStatus(s.pid, "VmRSS"); err == nil {
			for {
				old := s.peak.Load()
				if v <= old || s.peak.CompareAndSwap(old, v) {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// procStatus reads a "Vm...: N kB" line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			return n << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

func run(c config) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cnperf-answerbench-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Println("temp dir:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	srv := exec.Command(c.bin, "server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "answers.db"), "--log-level", "warn",
		"--plain-http", "--trust-agent-addrs") // loopback, simulated agents: TLS and their addresses are not what is measured
	srv.Env = append(os.Environ(), "CNPERF_USER_TOKEN="+userTok, "CNPERF_AGENT_TOKEN="+agentTok)
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	base := "http://" + addr
	hc := &http.Client{Timeout: 2 * time.Minute}
	user, _ := client.New(base, userTok, client.WithHTTPClient(hc))
	agent, _ := client.New(base, agentTok, client.WithHTTPClient(hc))
	if err := waitReady(ctx, base); err != nil {
		return err
	}
	sampler := &rssSampler{pid: srv.Process.Pid}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go sampler.run(sctx)
	phase := func(name string, start time.Time, note string) {
		peak := sampler.peak.Swap(0)
		if now, err := procStatus(srv.Process.Pid, "VmRSS"); err == nil {
			peak = max(peak, now) // a phase shorter than a sample
		}
		fmt.Printf("%-34s %8.1fs  peak RSS %10s  %s\n", name, time.Since(start).Seconds(), mb(peak), note)
	}
	idle, _ := procStatus(srv.Process.Pid, "VmRSS")
	fmt.Printf("cnperf server pid %d on %s: %d tasks x %d bytes of raw output (%.1f GB), %d in flight; RSS at start %s\n",
		srv.Process.Pid, addr, c.tasks, c.size, float64(c.tasks)*float64(c.size)/1e9, c.parallel, mb(idle))

	// Two agents keep beating while the run is stored.
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	for _, a := range []struct{ uid, ip string }{{"uid-a", "10.244.1.2"}, {"uid-b", "10.244.2.2"}} {
		hb := api.Heartbeat{PodUID: a.uid, PodName: "pod-" + a.uid, PodIP: a.ip, NodeName: "node-" + a.uid, BootID: "answerbench"}
		if _, err := agent.Heartbeat(ctx, hb); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		go func() {
			for beatCtx.Err() == nil {
				select {
				case <-beatCtx.Done():
				case <-time.After(time.Second):
				}
				bctx, cancel := context.WithTimeout(beatCtx, 5*time.Second)
				_, _ = agent.Heartbeat(bctx, hb)
				cancel()
			}
		}()
	}

	t0 := time.Now()
	rc := api.RunCreate{Suite: "answerbench", Tasks: make([]api.RunTask, c.tasks)}
	for i := range rc.Tasks {
		rc.Tasks[i] = api.RunTask{Src: "uid-a", Dst: "uid-b", Type: api.TypePing, Param: "-c 1"}
	}
	created, err := user.CreateRun(ctx, rc)
	if err != nil {
		return fmt.Errorf("create run: %w", err)
	}
	if err := store(ctx, c, agent); err != nil {
		return err
	}
	phase("store (fetch, start, report)", t0, fmt.Sprintf("%d reports of %s", c.tasks, mb(int64(c.size))))

	// The API: the run with every page of its tasks, and a listing.
	t0 = time.Now()
	var pages, answerMax int
	var after int64
	var tasks []api.TaskV2
	for {
		var r api.Run
		n, err := getJSON(ctx, hc, base+"/api/v2/runs/"+created.ID+"?limit=200&after="+strconv.FormatInt(after, 10), &r)
		if err != nil {
			return err
		}
		pages++
		answerMax = max(answerMax, n)
		tasks = append(tasks, r.Tasks...)
		if r.TasksNextAfter == 0 {
			break
		}
		after = r.TasksNextAfter
	}
	whole, err := user.GetRun(ctx, created.ID)
	if err != nil {
		return err
	}
	if err := checkTasks(tasks, c); err != nil {
		return fmt.Errorf("run pages: %w", err)
	}
	if err := checkTasks(whole.Tasks, c); err != nil {
		return fmt.Errorf("run (client, all pages): %w", err)
	}
	defAnswer, err := getJSON(ctx, hc, base+"/api/v2/runs/"+created.ID, &api.Run{})
	if err != nil {
		return err
	}
	phase("API: GET run (pages, summaries)", t0, fmt.Sprintf("%d pages of 200, largest answer %d bytes; default page (1000) %d bytes; state %s", pages, answerMax, defAnswer, whole.State))

	t0 = time.Now()
	var total atomic.Int64
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for _, t := range tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var h prefixCheck
			n, err := user.TaskRaw(ctx, t.TaskID, &h)
			if err == nil && (n != int64(c.size) || !bytes.HasPrefix(h.head, []byte(header(t.TaskID)))) {
				err = fmt.Errorf("raw output of %s: %d bytes starting %.60q, want %d bytes of its own output", t.TaskID, n, h.head, c.size)
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	phase("API: GET tasks/{id}/raw (each)", t0, fmt.Sprintf("%.2f GB read, every output whole and its own", float64(total.Load())/1e9))

	// The CLI.
	t0 = time.Now()
	cli := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, c.bin, args...)
		cmd.Env = append(os.Environ(), "CNPERF_SERVER="+base, "CNPERF_USER_TOKEN="+userTok)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("cnperf %s: %w: %s", strings.Join(args, " "), err, errb.String())
		}
		return out, nil
	}
	list, err := cli("task", "list", "--run", created.ID, "--limit", "1000", "--json")
	if err != nil {
		return err
	}
	var page api.TaskPage
	if err := jsonUnmarshal(list, &page); err != nil || page.Total != c.tasks {
		return fmt.Errorf("cnperf task list --run: total %d (%v), want %d", page.Total, err, c.tasks)
	}
	raw, err := cli("task", "raw", tasks[len(tasks)-1].TaskID)
	if err != nil {
		return err
	}
	if len(raw) != c.size {
		return fmt.Errorf("cnperf task raw: %d bytes, want %d", len(raw), c.size)
	}
	get, err := cli("task", "get", tasks[0].TaskID)
	if err != nil {
		return err
	}
	phase("CLI: task list, task raw, task get", t0, fmt.Sprintf("list %d bytes (%d tasks), raw %d bytes, get %d bytes", len(list), page.Total, len(raw), len(get)))

	// The dashboard's run page.
	t0 = time.Now()
	jar, _ := cookiejar.New(nil)
	dc := &http.Client{Jar: jar, Timeout: 2 * time.Minute}
	resp, err := dc.PostForm(base+"/login", url.Values{"token": {userTok}, "next": {"/runs/" + created.ID}})
	if err != nil {
		return fmt.Errorf("dashboard login: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(created.ID)) {
		return fmt.Errorf("dashboard run page: %s, %d bytes: %.300s", resp.Status, len(body), body)
	}
	phase("dashboard: run page", t0, fmt.Sprintf("%s, %d bytes", resp.Status, len(body)))

	stopSampling()
	hwm, err := procStatus(srv.Process.Pid, "VmHWM")
	if err != nil {
		return err
	}
	fmt.Printf("server peak RSS over the whole run (VmHWM): %s; target < %s: ", mb(hwm), mb(c.maxRSS))
	if hwm >= c.maxRSS {
		fmt.Println("NOT MET")
		return errors.New("server RSS over the target")
	}
	fmt.Println("met")
	return nil
}

func jsonUnmarshal(b []byte, v any) error { return jsonDecode(bytes.NewReader(b), v) }

// store plays agent uid-a: fetch, start and report every task with its
// raw output, -parallel reports at once.
func store(ctx context.Context, c config, agent *client.Client) error {
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	done := 0
	seen := map[string]bool{}
	deadline := time.Now().Add(time.Duration(c.tasks)*time.Second + 5*time.Minute)
	for done < c.tasks {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tasks handed out", done, c.tasks)
		}
		fr, err := agent.Fetch(ctx, "uid-a", 2*time.Second)
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		for _, t := range fr.Tasks {
			if seen[t.TaskID] {
				continue // re-offered while its report was on the way: started once
			}
			seen[t.TaskID] = true
			done++
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				err := agent.Start(ctx, t.TaskID, "uid-a")
				if err == nil {
					_, err = agent.Report(ctx, api.Report{TaskID: t.TaskID, PodUID: "uid-a", ReportID: "r-" + t.TaskID,
						State: api.StateSucceeded, TaskResult: output(t.TaskID, c.size),
						Result: []byte(`{"kind":"ping","tool":"ping","rtt_ms":{"count":1,"min":0.05,"avg":0.05,"max":0.05}}`)})
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("task %s: %w", t.TaskID, err))
				}
			}()
		}
		if err, _ := firstErr.Load().(error); err != nil {
			break
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

func header(taskID string) string { return "PING output of task " + taskID + "\n" }

// output is size bytes of ping-like text that starts with the task's id.
func output(taskID string, size int) string {
	var b strings.Builder
	b.Grow(size)
	b.WriteString(header(taskID))
	for seq := 1; b.Len() < size; seq++ {
		fmt.Fprintf(&b, "64 bytes from 10.244.2.2: icmp_seq=%d ttl=64 time=0.%03d ms\n", seq, seq%1000)
	}
	return b.String()[:size]
}

// prefixCheck keeps the first bytes written to it and discards the rest.
type prefixCheck struct{ head []byte }

func (p *prefixCheck) Write(b []byte) (int, error) {
	if n := 128 - len(p.head); n > 0 {
		p.head = append(p.head, b[:min(n, len(b))]...)
	}
	return len(b), nil
}

func checkTasks(ts []api.TaskV2, c config) error {
	if len(ts) != c.tasks {
		return fmt.Errorf("%d tasks, want %d", len(ts), c.tasks)
	}
	for _, t := range ts {
		if t.State != api.StateSucceeded || t.RawSize != int64(c.size) {
			return fmt.Errorf("task %s: %s, raw_size %d, want succeeded with %d", t.TaskID, t.State, t.RawSize, c.size)
		}
	}
	return nil
}

// getJSON GETs url with the user token, decodes the answer into v and
// returns its size in bytes.
func getJSON(ctx context.Context, hc *http.Client, u string, v any) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+userTok)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s %.200s", u, resp.Status, b)
	}
	return len(b), jsonUnmarshal(b, v)
}

func waitReady(ctx context.Context, base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("server not ready after 30s")
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
