package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/queuewatch"
	"github.com/cnperf/cnperf/internal/probe/rr"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udp"
	"github.com/cnperf/cnperf/internal/probe/wirewatch"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

const (
	userTok  = "user-secret"
	agentTok = "agent-secret"
)

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestIdentityFromEnv(t *testing.T) {
	full := map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns", "POD_UID": "u-1", "POD_IP": "10.244.1.4", "NODE_NAME": "n1", "NODE_IP": "10.170.0.10"}
	cases := []struct {
		name    string
		env     map[string]string
		host    bool
		wantErr string
		wantIP  string
	}{
		{name: "downward API", env: full, wantIP: "10.244.1.4"},
		{name: "missing uid", env: without(full, "POD_UID"), wantErr: "set POD_UID or --pod-uid"},
		{name: "bad pod ip", env: with(full, "POD_IP", "10.244.1"), wantErr: `pod IP "10.244.1" is not an IP address`},
		{name: "bad node ip", env: with(full, "NODE_IP", "node"), wantErr: "node IP"},
		{name: "host network takes the node ip", env: without(full, "POD_IP"), host: true, wantIP: "10.170.0.10"},
		{name: "nothing set", env: map[string]string{}, wantErr: "pod name missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := IdentityFromEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			id.HostNetwork = c.host
			err := id.Complete()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.PodIP != c.wantIP || id.PodNamespace != "ns" {
				t.Errorf("identity %+v", id)
			}
		})
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

func without(m map[string]string, k string) map[string]string {
	out := with(m, k, "")
	delete(out, k)
	return out
}

// switchable serves the current server's handler, or refuses every
// request while the server is "down" (a restart in progress).
type switchable struct {
	h atomic.Pointer[http.Handler]
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := s.h.Load()
	if h == nil {
		// Like a server that is not there: drop the connection.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

// env is a control plane on loopback: a server on a SQLite file behind a
// switchable handler, restartable on the same file.
type env struct {
	t      *testing.T
	dbPath string
	sw     *switchable
	hs     *http.Server
	url    string
	user   *client.Client

	mu     sync.Mutex // guards st and cancel
	st     store.Store
	srv    *server.Server
	cancel context.CancelFunc
	done   chan struct{}
	// noSession starts the agents polling only (Options.NoSession).
	noSession bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dbPath: filepath.Join(t.TempDir(), "cnperf.db"), sw: &switchable{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	e.hs = &http.Server{Handler: e.sw, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.hs.Serve(ln) }()
	e.user, _ = client.New(e.url, userTok)
	e.start()
	t.Cleanup(func() {
		e.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.hs.Shutdown(ctx)
	})
	return e
}

// start opens the store and serves a new server.Server.
func (e *env) start() {
	e.t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: userTok, AgentToken: agentTok,
		Logger: testLogger(e.t), MaxWait: 2 * time.Second, Probers: probe.NewRegistry(tcp.Prober{}, rr.Prober{}, &udp.Prober{}, wirewatch.Prober{}, queuewatch.Prober{})})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	e.mu.Lock()
	e.st, e.srv, e.cancel, e.done = st, srv, cancel, done
	e.mu.Unlock()
	h := srv.Handler()
	e.sw.h.Store(&h)
}

// stop takes the server down (requests fail) and closes its store.
func (e *env) stop() {
	e.sw.h.Store(nil)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st == nil {
		return
	}
	e.srv.CloseSessions() // as `cnperf server` does at shutdown
	e.cancel()
	<-e.done
	if err := e.st.Close(); err != nil {
		e.t.Errorf("close store: %v", err)
	}
	e.st = nil
}

// running is an agent running in the background.
type running struct {
	*Agent
	stop context.CancelFunc
	done chan struct{} // closed when Run returned
	err  error         // Run's error; read after done
}

// agent starts an agent on ip and waits until it is ready.
func (e *env) agent(name, ip string) *running {
	e.t.Helper()
	return e.agentIn(name, ip, false)
}

// agentIn starts an agent as agent does, in the host network when
// hostNetwork is set.
func (e *env) agentIn(name, ip string, hostNetwork bool) *running {
	e.t.Helper()
	cl, err := client.New(e.url, agentTok, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := New(Options{
		Client:   cl,
		Identity: Identity{PodName: name, PodNamespace: "test", PodUID: "uid-" + name, PodIP: ip, NodeName: "node-" + name, NodeIP: ip, HostNetwork: hostNetwork},
		Probers:  probe.NewRegistry(tcp.Prober{}, rr.Prober{}, &udp.Prober{}, wirewatch.Prober{}, queuewatch.Prober{}), Handlers: []engine.Handler{tcp.Handler{}, rr.Handler{}, &udp.Handler{}},
		ResponderPort: -1, MaxParallel: 2, PollWait: 2 * time.Second, Logger: testLogger(e.t).With("agent", name),
		NoSession: e.noSession,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, stop: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); r.err = a.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			e.t.Errorf("agent %s did not stop within 20s", name)
		}
	})
	select {
	case <-a.Ready():
	case <-r.done:
		e.t.Fatalf("agent %s: %v", name, r.err)
	case <-time.After(10 * time.Second):
		e.t.Fatalf("agent %s not ready after 10s", name)
	}
	return r
}

// waitRunning waits until the task runs on its agent.
func (e *env) waitRunning(id string, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		task, err := e.user.GetTask(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if task.State == api.StateRunning {
			return
		}
		if api.TerminalState(task.State) || time.Now().After(deadline) {
			e.t.Fatalf("task %s never ran: %s %q", id, task.State, task.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) wait(id string, within time.Duration) api.TaskV2 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	task, err := e.user.WaitTask(ctx, id, 50*time.Millisecond)
	if err != nil {
		e.t.Fatalf("wait for task %s: %v", id, err)
	}
	return task
}

func TestAgentRunsProbes(t *testing.T) {
	e := newEnv(t)
	a2 := e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	if !strings.HasPrefix(a2.ResponderAddr(), "127.0.0.2:") {
		t.Errorf("responder on %s, want the pod IP", a2.ResponderAddr())
	}
	ctx := context.Background()
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(500 * time.Millisecond)}},
		{Src: "b", Dst: "a", Spec: &probe.Spec{Kind: "rr", Count: 200}},
		// Through the return-address handshake, with the task's key.
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "udp", Reverse: true, Duration: probe.Duration(300 * time.Millisecond)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range run.Tasks {
		got := e.wait(task.TaskID, 30*time.Second)
		if got.State != api.StateSucceeded {
			t.Fatalf("task %s (%s): state %s reason %q", got.TaskID, got.Spec, got.State, got.Reason)
		}
		var res probe.Result
		if err := json.Unmarshal(got.Result, &res); err != nil {
			t.Fatalf("result of %s: %v", got.TaskID, err)
		}
		if got.StartedAt == nil || got.FinishedAt == nil {
			t.Errorf("task %s: started %v finished %v", got.TaskID, got.StartedAt, got.FinishedAt)
		}
		switch res.Kind {
		case "tcp":
			if res.ThroughputBps == nil || res.ThroughputBps.Receiver <= 0 {
				t.Errorf("tcp result without throughput: %s", got.Result)
			}
		case "rr":
			if res.RTTms == nil || res.RTTms.Count == 0 {
				t.Errorf("rr result without RTTs: %s", got.Result)
			}
		case "udp":
			if res.Packets == nil || res.Packets.Received == 0 {
				t.Errorf("udp reverse result without packets: %s", got.Result)
			}
		default:
			t.Errorf("unexpected result kind %q", res.Kind)
		}
	}
	final, err := e.user.GetRun(ctx, run.ID)
	if err != nil || final.State != api.RunSucceeded {
		t.Errorf("run: %+v %v", final.State, err)
	}
}

// TestAgentCancelAndTimeout: a cancelled task stops at once; a task past
// its timeout ends timed out; a task whose parameters the tool refuses
// ends failed with the reason.
func TestAgentCancelAndTimeout(t *testing.T) {
	e := newEnv(t)
	e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	ctx := context.Background()
	run, err := e.user.CreateRun(ctx, api.RunCreate{AllowConcurrency: true, Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(60 * time.Second)}},
		{Src: "b", Dst: "a", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(60 * time.Second)}, Timeout: probe.Duration(time.Second)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	long, short := run.Tasks[0].TaskID, run.Tasks[1].TaskID
	// Wait until the long one runs, then cancel it.
	e.waitRunning(long, 20*time.Second)
	if _, err := e.user.CancelTask(ctx, long, "test cancels"); err != nil {
		t.Fatal(err)
	}
	got := e.wait(short, 20*time.Second)
	if got.State != api.StateTimedOut || !strings.Contains(got.Reason, "time limit") {
		t.Errorf("short task: state %s reason %q, want timed_out by the agent", got.State, got.Reason)
	}
	got = e.wait(long, 5*time.Second)
	if got.State != api.StateCancelled || got.Reason != "test cancels" {
		t.Errorf("cancelled task: state %s reason %q", got.State, got.Reason)
	}
	// The agent stopped it: its slot frees, so a new task runs at once.
	run2, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "rr", Count: 50}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.wait(run2.Tasks[0].TaskID, 30*time.Second); got.State != api.StateSucceeded {
		t.Errorf("follow-up task: %s %q", got.State, got.Reason)
	}
}

// TestAgentResultSurvivesRestart: the server goes away while a task runs;
// the agent keeps its result and delivers it, once, to the restarted
// server on the same database.
func TestAgentResultSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	ctx := context.Background()
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(1500 * time.Millisecond)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	e.waitRunning(id, 20*time.Second)
	e.stop() // the task finishes while the server is down
	time.Sleep(3 * time.Second)
	e.start()
	got := e.wait(id, 20*time.Second)
	if got.State != api.StateSucceeded || len(got.Result) == 0 {
		t.Fatalf("after restart: state %s reason %q result %d bytes", got.State, got.Reason, len(got.Result))
	}
	page, err := e.user.ListTasks(ctx, client.TaskQuery{})
	if err != nil || page.Total != 1 {
		t.Errorf("tasks after restart: %d (%v), want 1", page.Total, err)
	}
}

// TestAgentShutdown: cancelling Run stops a running task, reports it
// cancelled and returns promptly.
func TestAgentShutdown(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	ctx := context.Background()
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(60 * time.Second)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	e.waitRunning(id, 20*time.Second)
	a.stop()
	// Generous bound: stopping takes about a second; the bound only says
	// that nothing hangs (the task alone would run a minute).
	select {
	case <-a.done:
		if a.err != nil {
			t.Errorf("Run: %v", a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop within 30s")
	}
	got, err := e.user.GetTask(ctx, id)
	if err != nil || got.State != api.StateCancelled || got.Reason != errShutdown.Error() {
		t.Errorf("task after agent shutdown: %s %q %v", got.State, got.Reason, err)
	}
}

// TestAgentToolTasks runs the seed's tool tasks through the agents: ping,
// and iperf/iperf3 whose destination starts the server.
func TestAgentToolTasks(t *testing.T) {
	for _, tool := range []string{"ping", "iperf", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-test-deps.sh installs it)", tool)
		}
	}
	e := newEnv(t)
	e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	ctx := context.Background()
	mk := func(typ, param string) api.TaskCreate {
		return api.TaskCreate{SrcPodUID: "uid-a", SrcPodIP: "127.0.0.2", DstPodUID: "uid-b", DstPodIP: "127.0.0.3", TaskType: typ, TaskParam: param}
	}
	ids, err := e.user.CreateTasks(ctx, []api.TaskCreate{
		mk("ping", "-c 3 -i 0.2"), mk("iperf", "-t 1 -i 1 -f M"), mk("iperf3", "-t 1"), mk("iperf3", "-u -b 10M -t 1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// (iperf2 UDP needs the server's final report over UDP, which a loaded
	// machine may lose; its server request carries -u, see the server's
	// TestIperfHandoff.)
	want := []string{"3 packets transmitted", "MBytes/sec", `"sum_received"`, `"lost_percent"`}
	for i, id := range ids {
		e.wait(id, 40*time.Second)
		task, err := e.user.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.TaskStatus != api.TaskStatusFinished {
			t.Errorf("task %d (%s %s): TaskStatus %d reason %q output %.300s", i, task.TaskType, task.TaskParam, task.TaskStatus, task.TaskReason, task.TaskResult)
			continue
		}
		if !strings.Contains(task.TaskResult, want[i]) {
			t.Errorf("task %d (%s): raw output lacks %q: %.500s", i, task.TaskType, want[i], task.TaskResult)
		}
	}
}

func TestStorableText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"PING 10.0.0.1", "PING 10.0.0.1"},
		{"a\x00b", "a\uFFFDb"},
		{"bad \xff\xfe end", "bad \uFFFD end"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := storableText(tt.in); got != tt.want {
			t.Errorf("storableText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestAgentRefusesWireInPod: a wire watch watches the node's underlay and
// a queue watch the node's qdiscs, so only a host-network agent runs one;
// a pod's agent fails the task saying so.
func TestAgentRefusesWireInPod(t *testing.T) {
	e := newEnv(t)
	e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	run, err := e.user.CreateRun(context.Background(), api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: probe.KindWire, Duration: probe.Duration(time.Second),
			Watch: &probe.WatchFlow{Proto: "udp", Src: "127.0.0.2", Dst: "127.0.0.3", DstPort: 5201}}},
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: probe.KindQueue, Duration: probe.Duration(time.Second)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, kind := range []string{probe.KindWire, probe.KindQueue} {
		got := e.wait(run.Tasks[i].TaskID, 30*time.Second)
		if got.State != api.StateFailed || !strings.Contains(got.Reason, "host-network agent") {
			t.Errorf("%s watch on a pod's agent: state %s reason %q, want failed naming the host-network agent", kind, got.State, got.Reason)
		}
	}
}

// TestIdleSessionBuildsNoHeartbeats: with a session held and nothing
// changing, the agent does not wake to build heartbeats (presence is the
// session's keep-alives); the loop woke every second to find its lists
// unchanged, most of an idle agent's CPU.
func TestIdleSessionBuildsNoHeartbeats(t *testing.T) {
	e := newEnv(t)
	r := e.agent("idle", "127.0.0.1")
	deadline := time.Now().Add(10 * time.Second)
	for r.link.sess.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no session after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	n0 := r.beats.Load()
	time.Sleep(3 * time.Second)
	// One for a session re-opened meanwhile (its hello), at most.
	if n := r.beats.Load() - n0; n > 1 {
		t.Errorf("%d heartbeats built in 3 s of an idle session, want at most 1", n)
	}
}
