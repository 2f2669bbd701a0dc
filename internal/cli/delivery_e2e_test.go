package cli_test

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
func TestAgentSIGKILLDeliversOutboxOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	addr := freeAddr(t)
	base := "http://" + addr
	srv := start(t, "server", bin, []string{"CNPERF_USER_TOKEN=u-kill", "CNPERF_AGENT_TOKEN=a-kill"},
		"server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "cnperf.db"))
	srv.waitFor(t, "server listening", 20*time.Second)

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
		env := []string{"CNPERF_TOKEN=a-kill", "POD_NAME=pod-a", "POD_NAMESPACE=e2e", "POD_UID=uid-pod-a",
			"POD_IP=127.0.0.2", "NODE_NAME=node-a", "NODE_IP=127.0.0.2"}
		return start(t, name, bin, env, "agent", "--server", gateURL, "--responder-port", "0", "--stamp-port", "0", "--state-dir", stateDir)
	}
	a := agentA("agent-a")
	b := start(t, "agent-b", bin, []string{"CNPERF_TOKEN=a-kill", "POD_NAME=pod-b", "POD_NAMESPACE=e2e", "POD_UID=uid-pod-b",
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

	// Restarted on the same state directory, with the gate open.
	gate.mu.Lock()
	gate.open = true
	gate.mu.Unlock()
	a2 := agentA("agent-a-restarted")
	a2.waitFor(t, "results of a previous process to deliver", 20*time.Second)
	deadline = time.Now().Add(20 * time.Second)
	for {
		user.call("GET", "/api/v2/tasks/"+id, nil, &task)
		if api.TerminalState(task.State) {
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
