package e2e_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// reportGate is a proxy between an agent and the server that refuses
// result reports (503) while closed and counts the reports the server
// accepted while open, by task and by whether they were duplicates.
type reportGate struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex // guards every field below
	open  bool
	tried map[string]int // task id → refused attempts
	taken map[string]int // task id → reports the server stored (not duplicates)
	dups  map[string]int // task id → duplicates the server answered
}

func (g *reportGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/report") {
		g.proxy.ServeHTTP(w, r)
		return
	}
	task := filepath.Base(filepath.Dir(r.URL.Path))
	g.mu.Lock()
	open := g.open
	if !open {
		g.tried[task]++
	}
	g.mu.Unlock()
	if !open {
		http.Error(w, `{"error":"gate closed"}`, http.StatusServiceUnavailable)
		return
	}
	rec := &recorder{ResponseWriter: w}
	g.proxy.ServeHTTP(rec, r)
	var rep api.ReportReply
	if rec.code == http.StatusOK && json.Unmarshal(rec.body.Bytes(), &rep) == nil {
		g.mu.Lock()
		if rep.Duplicate {
			g.dups[task]++
		} else {
			g.taken[task]++
		}
		g.mu.Unlock()
	}
}

type recorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (g *reportGate) counts(task string) (tried, taken, dups int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tried[task], g.taken[task], g.dups[task]
}

// TestAgentSIGKILLDeliversOutboxOnce runs the real `cnperf server` and two
// `cnperf agent` processes. Agent a reaches the server through a gate that
// refuses its result reports: it finishes a task, keeps the report in
// --state-dir and is killed with SIGKILL. Restarted on the same state
// directory (the gate now open), it delivers the result, which the server
// stores once: the task succeeded with a's result, not failed as lost.
func TestAgentSIGKILLDeliversOutboxOnce(t *testing.T) { testAgentKillDelivers(t, false) }

// TestAgentAwayDeliversLateResult: as TestAgentSIGKILLDeliversOutboxOnce,
// but agent a stays away until the server has failed its task "agent went
// offline" (about 13 s). The result it delivers when it is back is stored
// all the same, the task marked late (late_reason), and the outbox is
// empty: nothing refused, nothing deleted unacknowledged.
func TestAgentAwayDeliversLateResult(t *testing.T) { testAgentKillDelivers(t, true) }

func testAgentKillDelivers(t *testing.T, away bool) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	srv, addr := startServer(t, bin, dir, "kill")
	base := "http://" + addr

	target, _ := url.Parse(base)
	gate := &reportGate{proxy: httputil.NewSingleHostReverseProxy(target),
		tried: map[string]int{}, taken: map[string]int{}, dups: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: gate, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	gateURL := "http://" + ln.Addr().String()

	stateDir := filepath.Join(dir, "state-a")
	agentA := func(name string) *proc {
		env := []string{"CNPERF_AGENT_TOKEN=a-kill", "POD_NAME=pod-a", "POD_NAMESPACE=e2e", "POD_UID=uid-pod-a",
			"POD_IP=127.0.0.2", "NODE_NAME=node-a", "NODE_IP=127.0.0.2"}
		return start(t, name, bin, env, "agent", "--server", gateURL, "--responder-port", "0", "--stamp-port", "0", "--state-dir", stateDir)
	}
	a := agentA("agent-a")
	b := start(t, "agent-b", bin, []string{"CNPERF_AGENT_TOKEN=a-kill", "POD_NAME=pod-b", "POD_NAMESPACE=e2e", "POD_UID=uid-pod-b",
		"POD_IP=127.0.0.3", "NODE_NAME=node-b", "NODE_IP=127.0.0.3"},
		"agent", "--server", base, "--responder-port", "0", "--stamp-port", "0", "--state-dir", filepath.Join(dir, "state-b"))
	a.waitFor(t, "agent ready", 20*time.Second)
	b.waitFor(t, "agent ready", 20*time.Second)

	user := httpc{t: t, base: base, token: "u-kill"}
	var run api.Run
	if code := user.call("POST", "/api/v2/runs", api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "rr", Count: 200}},
	}}, &run); code != http.StatusCreated || len(run.Tasks) != 1 {
		t.Fatalf("create run: %d %+v", code, run)
	}
	id := run.Tasks[0].TaskID

	// The task finishes on a; its report is refused, and kept on disk.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tried, _, _ := gate.counts(id); tried > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("agent a never tried to report the task")
		}
		time.Sleep(20 * time.Millisecond)
	}
	files, _ := filepath.Glob(filepath.Join(stateDir, "outbox", "*.report.json"))
	if len(files) != 1 {
		t.Fatalf("outbox holds %v, want the one report", files)
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	var task api.TaskV2
	user.call("GET", "/api/v2/tasks/"+id, nil, &task)
	if task.State != api.StateRunning {
		t.Fatalf("task %s after the kill: %s %q, want still running (its result undelivered)", id, task.State, task.Reason)
	}

	if away {
		// Away until the reaper fails the task for the agent's absence.
		deadline = time.Now().Add(40 * time.Second)
		for task.State != api.StateFailed {
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %s 40 s after its agent was killed, want failed %q", id, task.State, store.ReasonAgentOffline)
			}
			time.Sleep(200 * time.Millisecond)
			user.call("GET", "/api/v2/tasks/"+id, nil, &task)
		}
		if task.Reason != store.ReasonAgentOffline {
			t.Fatalf("task %s of the absent agent: failed %q, want %q", id, task.Reason, store.ReasonAgentOffline)
		}
	}

	// Restarted on the same state directory, with the gate open.
	gate.mu.Lock()
	gate.open = true
	gate.mu.Unlock()
	a2 := agentA("agent-a-restarted")
	a2.waitFor(t, "results of a previous process to deliver", 20*time.Second)
	deadline = time.Now().Add(20 * time.Second)
	for {
		user.call("GET", "/api/v2/tasks/"+id, nil, &task)
		if api.TerminalState(task.State) && (!away || task.State != api.StateFailed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s 20s after the restart", id, task.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let any stray second delivery arrive before counting.
	time.Sleep(2 * time.Second)
	tried, taken, dups := gate.counts(id)
	t.Logf("task %s: %d refused attempts before the kill; after the restart stored %d time(s), %d duplicate(s); state %s", id, tried, taken, dups, task.State)
	if task.State != api.StateSucceeded || len(task.Result) == 0 {
		t.Errorf("task %s: %s %q result %d bytes, want succeeded with a's result", id, task.State, task.Reason, len(task.Result))
	}
	var res probe.Result
	if err := json.Unmarshal(task.Result, &res); err != nil || res.Kind != probe.KindRR || res.RTTms == nil || res.RTTms.Count == 0 {
		t.Errorf("stored result %s (%v), want a's rr result", task.Result, err)
	}
	if taken != 1 {
		t.Errorf("server stored the report %d times, want exactly once", taken)
	}
	if want := map[bool]string{true: store.ReasonAgentOffline}[away]; task.LateReason != want {
		t.Errorf("task %s: late_reason %q, want %q", id, task.LateReason, want)
	}
	if files, _ := filepath.Glob(filepath.Join(stateDir, "outbox", "*")); len(files) != 0 {
		t.Errorf("outbox after delivery: %v", files)
	}
	if strings.Contains(srv.out.String(), "agent restarted and lost the task") {
		t.Errorf("server failed the task as lost although its result was in the outbox:\n%s", srv.out.String())
	}
	a2.stop(t, 15*time.Second)
	b.stop(t, 15*time.Second)
	srv.stop(t, 15*time.Second)
}

// TestServerSIGKILLDeliversEveryResultOnce: the real server is killed with
// SIGKILL while a run of 200 tasks is in flight and restarted on the same
// database; every task ends succeeded and no result is stored twice.
func TestServerSIGKILLDeliversEveryResultOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	addr := freeAddr(t)
	base := "http://" + addr
	serverArgs := append([]string{"server", "--listen", addr, "--db", "sqlite:" + filepath.Join(dir, "cnperf.db")}, loopbackServer...)
	srvEnv := []string{"CNPERF_USER_TOKEN=u-skill", "CNPERF_AGENT_TOKEN=a-skill"}
	srv := start(t, "server", bin, srvEnv, serverArgs...)
	srv.waitFor(t, "server listening", 20*time.Second)

	target, _ := url.Parse(base)
	gate := &reportGate{proxy: httputil.NewSingleHostReverseProxy(target), open: true,
		tried: map[string]int{}, taken: map[string]int{}, dups: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: gate, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	gateURL := "http://" + ln.Addr().String()
	for _, a := range []struct{ name, ip string }{{"pod-a", "127.0.0.2"}, {"pod-b", "127.0.0.3"}} {
		p := start(t, a.name, bin, []string{"CNPERF_AGENT_TOKEN=a-skill", "POD_NAME=" + a.name, "POD_NAMESPACE=e2e", "POD_UID=uid-" + a.name,
			"POD_IP=" + a.ip, "NODE_NAME=node-" + a.name, "NODE_IP=" + a.ip},
			"agent", "--server", gateURL, "--responder-port", "0", "--stamp-port", "0", "--state-dir", filepath.Join(dir, a.name))
		p.waitFor(t, "agent ready", 20*time.Second)
	}
	user := httpc{t: t, base: base, token: "u-skill"}
	const n = 200
	rc := api.RunCreate{AllowConcurrency: true}
	for i := range n {
		src, dst := "pod-a", "pod-b"
		if i%2 == 1 {
			src, dst = dst, src
		}
		rc.Tasks = append(rc.Tasks, api.RunTask{Src: src, Dst: dst, Spec: &probe.Spec{Kind: "rr", Count: 20}})
	}
	var run api.Run
	if code := user.call("POST", "/api/v2/runs", rc, &run); code != http.StatusCreated || len(run.Tasks) != n {
		t.Fatalf("create run: %d, %d tasks", code, len(run.Tasks))
	}
	stored := func() int {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		return len(gate.taken)
	}
	deadline := time.Now().Add(60 * time.Second)
	for stored() < n/4 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d results stored after 60s", stored())
		}
		time.Sleep(10 * time.Millisecond)
	}
	atKill := stored()
	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	time.Sleep(time.Second)
	srv2 := start(t, "server-restarted", bin, srvEnv, serverArgs...)
	srv2.waitFor(t, "server listening", 20*time.Second)
	deadline = time.Now().Add(90 * time.Second)
	for {
		id := run.ID
		run = api.Run{} // a fresh map for the counts
		user.call("GET", "/api/v2/runs/"+id, nil, &run)
		if run.State != api.RunRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run still running 90s after the restart: %v", run.Counts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	gate.mu.Lock()
	defer gate.mu.Unlock()
	twice := 0
	for _, k := range gate.taken {
		if k > 1 {
			twice++
		}
	}
	t.Logf("server SIGKILLed after %d of %d results; run %s: %v; stored twice: %d", atKill, n, run.State, run.Counts, twice)
	if run.State != api.RunSucceeded || run.Counts[api.StateSucceeded] != n {
		t.Errorf("run %s, counts %v: want all %d succeeded", run.State, run.Counts, n)
	}
	if twice != 0 {
		t.Errorf("%d results stored twice", twice)
	}
}

// TestAgentSIGKILLMidTaskFails: an agent killed with SIGKILL while its
// task runs (and not restarted) has the task failed by the server within
// 13 s: offline after 10 s of silence, found by the reaper (every 3 s).
func TestAgentSIGKILLMidTaskFails(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	_, addr := startServer(t, bin, dir, "mid")
	base := "http://" + addr
	agents := map[string]*proc{}
	for _, a := range []struct{ name, ip string }{{"pod-a", "127.0.0.2"}, {"pod-b", "127.0.0.3"}} {
		p := start(t, a.name, bin, []string{"CNPERF_AGENT_TOKEN=a-mid", "POD_NAME=" + a.name, "POD_NAMESPACE=e2e", "POD_UID=uid-" + a.name,
			"POD_IP=" + a.ip, "NODE_NAME=node-" + a.name, "NODE_IP=" + a.ip},
			"agent", "--server", base, "--responder-port", "0", "--stamp-port", "0", "--state-dir", filepath.Join(dir, a.name))
		p.waitFor(t, "agent ready", 20*time.Second)
		agents[a.name] = p
	}
	user := httpc{t: t, base: base, token: "u-mid"}
	var run api.Run
	if code := user.call("POST", "/api/v2/runs", api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(60 * time.Second)}},
	}}, &run); code != http.StatusCreated || len(run.Tasks) != 1 {
		t.Fatalf("create run: %d %+v", code, run)
	}
	id := run.Tasks[0].TaskID
	var task api.TaskV2
	deadline := time.Now().Add(30 * time.Second)
	for task.State != api.StateRunning {
		if time.Now().After(deadline) {
			t.Fatalf("task %s never ran: %s", id, task.State)
		}
		time.Sleep(20 * time.Millisecond)
		user.call("GET", "/api/v2/tasks/"+id, nil, &task)
	}
	killed := time.Now()
	if err := agents["pod-a"].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !api.TerminalState(task.State) {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("task %s still %s 30s after its agent was killed", id, task.State)
		}
		time.Sleep(100 * time.Millisecond)
		user.call("GET", "/api/v2/tasks/"+id, nil, &task)
	}
	took := time.Since(killed)
	t.Logf("agent killed mid-task; task %s after %v: %q", task.State, took.Round(100*time.Millisecond), task.Reason)
	if task.State != api.StateFailed || took > 13500*time.Millisecond {
		t.Errorf("task %s %q after %v, want failed within 13 s", task.State, task.Reason, took)
	}
}
