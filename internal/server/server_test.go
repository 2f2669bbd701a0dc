package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

const (
	userTok  = "user-secret"
	agentTok = "agent-secret"
)

// fakeClock is an injected clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	t     *testing.T
	dsn   string
	st    store.Store
	srv   *Server
	ts    *httptest.Server
	clock *fakeClock
	user  *client.Client
	agent *client.Client
}

// openSQLite opens a throwaway SQLite store, closed when the test ends.
func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newFixture(t *testing.T, dsn string, clock *fakeClock) *fixture {
	t.Helper()
	if clock == nil {
		clock = &fakeClock{t: time.Date(2026, 4, 27, 7, 0, 0, 0, time.UTC)}
	}
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	srv, err := New(Options{Store: st, UserToken: userTok, AgentToken: agentTok, Now: clock.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	f := &fixture{t: t, dsn: dsn, st: st, srv: srv, ts: ts, clock: clock}
	f.user, _ = client.New(ts.URL, userTok)
	f.agent, _ = client.New(ts.URL, agentTok)
	t.Cleanup(f.close)
	return f
}

func (f *fixture) close() {
	if f.ts != nil {
		f.ts.Close()
		f.ts = nil
		if err := f.st.Close(); err != nil {
			f.t.Errorf("close store: %v", err)
		}
	}
}

func (f *fixture) beat(uid, name, ip, node string) {
	f.t.Helper()
	_, err := f.agent.Heartbeat(context.Background(), api.Heartbeat{PodUID: uid, PodName: name, PodIP: ip, NodeName: node,
		NodeIP: "10.170.0.10", ResponderAddr: ip + ":5201"})
	if err != nil {
		f.t.Fatalf("heartbeat %s: %v", uid, err)
	}
}

// twoAgents registers agents "a" (10.244.1.12) and "b" (10.244.2.7).
func (f *fixture) twoAgents() {
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
}

// dispatchedTask registers agents "a" and "b", creates one ping task and
// lets agent a fetch it; it returns the task's id.
func (f *fixture) dispatchedTask() string {
	f.t.Helper()
	f.twoAgents()
	ctx := context.Background()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil {
		f.t.Fatal(err)
	}
	return ids[0]
}

// dispatchedRunTask registers agents "a" and "b", creates a run of one
// ping task and lets agent a fetch it; it returns the run's id and the
// task's.
func (f *fixture) dispatchedRunTask() (runID, taskID string) {
	f.t.Helper()
	f.twoAgents()
	ctx := context.Background()
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: "uid-a", Dst: "uid-b", Spec: &probe.Spec{Kind: "ping"}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	fr, err := f.agent.Fetch(ctx, "uid-a", 0)
	if err != nil || len(fr.Tasks) != 1 {
		f.t.Fatalf("fetch: %+v %v", fr, err)
	}
	return run.ID, fr.Tasks[0].TaskID
}

func (f *fixture) do(method, path, token string, body []byte) (int, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.ts.URL+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (f *fixture) taskTotal() int {
	f.t.Helper()
	_, n, err := f.st.ListTasks(context.Background(), store.TaskFilter{}, store.Page{Limit: 1})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func pingTask(param string) api.TaskCreate {
	return api.TaskCreate{SrcPodUID: "uid-a", SrcPodIP: "10.244.1.12", DstPodUID: "uid-b", DstPodIP: "10.244.2.7", TaskParam: param, TaskType: "ping"}
}

func TestAuth(t *testing.T) { storetest.ForEach(t, testAuth) }

func testAuth(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	cases := []struct {
		name, method, path, token string
		want                      int
	}{
		{"clients no token", "GET", "/api/v1/external/clients", "", 401},
		{"clients wrong token", "GET", "/api/v1/external/clients", "nope", 401},
		{"clients agent token", "GET", "/api/v1/external/clients", agentTok, 401},
		{"clients user token", "GET", "/api/v1/external/clients", userTok, 200},
		{"heartbeat user token", "POST", "/api/v1/internal/heartbeat", userTok, 401},
		{"get_tasks no token", "GET", "/api/v1/internal/get_tasks?pod_uid=x", "", 401},
		{"report user token", "POST", "/api/v1/internal/report_task", userTok, 401},
		{"task create no token", "POST", "/api/v1/external/task/create", "", 401},
		{"task no token", "GET", "/api/v1/external/task?task_id=x", "", 401},
		{"runs agent token", "POST", "/api/v2/runs", agentTok, 401},
		{"tasks no token", "GET", "/api/v2/tasks", "", 401},
		{"agents no token", "GET", "/api/v2/agents", "", 401},
		{"fetch user token", "GET", "/api/v2/agent/tasks?pod_uid=x", userTok, 401},
		{"openapi", "GET", "/api/v2/openapi.json", "", 200},
		{"healthz", "GET", "/healthz", "", 200},
		{"readyz", "GET", "/readyz", "", 200},
		{"unknown path no token", "GET", "/api/v3/x", "", 401},
		{"unknown path", "GET", "/api/v3/x", userTok, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, c.token, nil)
			if code != c.want {
				t.Fatalf("status %d, want %d (body %s)", code, c.want, body)
			}
			if code == 401 && !strings.Contains(string(body), "token") {
				t.Errorf("401 body does not explain: %s", body)
			}
		})
	}
}

func TestBadInput(t *testing.T) { storetest.ForEach(t, testBadInput) }

func testBadInput(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.twoAgents()
	good, _ := json.Marshal([]api.TaskCreate{pingTask("-c 5")})
	mk := func(tc ...api.TaskCreate) []byte { b, _ := json.Marshal(tc); return b }
	unknownUID := pingTask("-c 5")
	unknownUID.DstPodUID = "no-such-pod"
	badType := pingTask("-c 5")
	badType.TaskType = "nmap"
	huge := append([]byte(`[{"task_param":"`), bytes.Repeat([]byte("x"), 2<<20)...)
	huge = append(huge, []byte(`"}]`)...)
	cases := []struct {
		name string
		body []byte
		want int
		msg  string // must appear in the answer
	}{
		{"malformed json", []byte(`[{"src_pod_uid": "uid-a",`), 400, "malformed JSON"},
		{"not an array", []byte(`{"src_pod_uid": "uid-a"}`), 400, "want []api.TaskCreate"},
		{"unknown field", []byte(`[{"src_pod_uid":"uid-a","bogus":1}]`), 400, "bogus"},
		{"trailing data", append(append([]byte{}, good...), []byte(` []`)...), 400, "trailing data"},
		{"empty list", []byte(`[]`), 400, "empty task list"},
		{"unknown task type", mk(badType), 400, `unknown task type "nmap"`},
		{"shell metacharacter", mk(pingTask("-c 5; rm -rf /")), 400, "[0].task_param"},
		{"command substitution", mk(pingTask("-c $(reboot)")), 400, "task_param"},
		{"flag outside allow-list", mk(pingTask("-c 5 --no-such-flag")), 400, "task_param"},
		{"target smuggled as argument", mk(pingTask("-c 5 8.8.8.8")), 400, "task_param"},
		{"unknown pod uid", mk(pingTask("-c 5"), unknownUID), 400, `no agent with pod uid "no-such-pod"`},
		{"wrong pod ip", mk(api.TaskCreate{SrcPodUID: "uid-a", SrcPodIP: "10.9.9.9", DstPodUID: "uid-b", TaskType: "ping"}), 400, "src_pod_ip"},
		{"huge body", huge, 413, "body larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do("POST", "/api/v1/external/task/create", userTok, c.body)
			if code != c.want {
				t.Fatalf("status %d, want %d (body %.300s)", code, c.want, body)
			}
			var env api.Envelope
			if err := json.Unmarshal(body, &env); err != nil {
				t.Fatalf("answer is not the v1 envelope: %v: %.300s", err, body)
			}
			if env.Status != c.want || !strings.Contains(env.Msg, c.msg) {
				t.Errorf("envelope status %d msg %q; want status %d and a msg containing %q", env.Status, env.Msg, c.want, c.msg)
			}
			if n := f.taskTotal(); n != 0 {
				t.Errorf("%d tasks stored after a refused request", n)
			}
		})
	}
	// v2 run with bad input: names the field, stores nothing.
	v2 := []struct {
		name, body, msg string
	}{
		{"unknown kind", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"warp"}}]}`, "tasks[0].spec.kind"},
		{"target set", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"tcp","target":"1.2.3.4:1"}}]}`, "tasks[0].spec.target"},
		{"unknown agent", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"}},{"src":"pod-a","dst":"pod-z","spec":{"kind":"rr"}}]}`, "tasks[1].dst"},
		{"bad duration", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"tcp","duration":"soon"}}]}`, "duration"},
		{"no tasks", `{"tasks":[]}`, "tasks"},
	}
	for _, c := range v2 {
		t.Run("v2 "+c.name, func(t *testing.T) {
			code, body := f.do("POST", "/api/v2/runs", userTok, []byte(c.body))
			if code != 400 {
				t.Fatalf("status %d, want 400 (%s)", code, body)
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || !strings.Contains(eb.Error, c.msg) {
				t.Errorf("error %q (%v); want it to name %q", eb.Error, err, c.msg)
			}
			if n := f.taskTotal(); n != 0 {
				t.Errorf("%d tasks stored after a refused run", n)
			}
		})
	}
}

// TestSeedWorkflow replays the seed's user workflow against the v1 API and
// checks the JSON shapes.
func TestSeedWorkflow(t *testing.T) { storetest.ForEach(t, testSeedWorkflow) }

func testSeedWorkflow(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.twoAgents()
	ctx := context.Background()
	code, body := f.do("GET", "/api/v1/external/clients", userTok, nil)
	if code != 200 {
		t.Fatalf("clients: %d %s", code, body)
	}
	for _, key := range []string{`"status":0`, `"msg":""`, `"ID":`, `"PodName":"pod-a"`, `"PodUID":"uid-a"`, `"PodIP":"10.244.1.12"`, `"NodeName":"node-1"`, `"NodeIP":`, `"ClientStatus":1`, `"RegisterTime":`, `"UpdateTime":`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("clients answer lacks %s: %s", key, body)
		}
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 5"), {SrcPodUID: "uid-a", SrcPodIP: "10.244.1.12", DstPodUID: "uid-b", DstPodIP: "10.244.2.7", TaskParam: "-i 1 -f M", TaskType: "iperf"}})
	if err != nil || len(ids) != 2 {
		t.Fatalf("create: %v %v", ids, err)
	}
	// The seed's agent API: get_tasks claims, report_task reports.
	code, body = f.do("GET", "/api/v1/internal/get_tasks?pod_uid=uid-a", agentTok, nil)
	if code != 200 || !strings.Contains(string(body), ids[0]) {
		t.Fatalf("get_tasks: %d %s", code, body)
	}
	rep, _ := json.Marshal(api.Report{TaskID: ids[0], PodUID: "uid-a", TaskStatus: 3, TaskResult: "PING 10.244.2.7 ..."})
	if code, body = f.do("POST", "/api/v1/internal/report_task", agentTok, rep); code != 200 {
		t.Fatalf("report_task: %d %s", code, body)
	}
	code, body = f.do("GET", "/api/v1/external/task?task_id="+ids[0], userTok, nil)
	if code != 200 {
		t.Fatalf("task: %d %s", code, body)
	}
	for _, key := range []string{`"TaskID":"` + ids[0], `"SrcPodUID":"uid-a"`, `"SrcPodID":"uid-a"`, `"DstPodIP":"10.244.2.7"`, `"TaskParam":"-c 5"`, `"TaskType":"ping"`, `"TaskStatus":3`, `"TaskResult":"PING 10.244.2.7 ..."`, `"CreateTime":`, `"UpdateTime":`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("task answer lacks %s: %s", key, body)
		}
	}
	code, body = f.do("GET", "/api/v1/external/task?task_id=nope", userTok, nil)
	if code != 404 || !strings.Contains(string(body), `"status":404`) {
		t.Errorf("unknown task: %d %s", code, body)
	}
}

func TestReaperTiming(t *testing.T) { storetest.ForEach(t, testReaperTiming) }

func testReaperTiming(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 5")})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := f.agent.Fetch(ctx, "uid-a", 0)
	if err != nil || len(fr.Tasks) != 1 {
		t.Fatalf("fetch: %+v %v", fr, err)
	}
	if err := f.agent.Start(ctx, ids[0], "uid-a"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance     time.Duration
		beatB       bool
		wantOffline []string
	}{
		{3 * time.Second, true, nil},
		{3 * time.Second, true, nil},
		{3 * time.Second, true, nil},               // a silent 9 s: still online
		{2 * time.Second, true, []string{"uid-a"}}, // 11 s: offline
		{3 * time.Second, true, nil},
	}
	for i, s := range steps {
		f.clock.Add(s.advance)
		if s.beatB {
			f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
		}
		res, err := f.srv.Reap(ctx)
		if err != nil {
			t.Fatalf("step %d: reap: %v", i, err)
		}
		var got []string
		for _, a := range res.Offline {
			got = append(got, a.PodUID)
		}
		if fmt.Sprint(got) != fmt.Sprint(s.wantOffline) {
			t.Fatalf("step %d: offline %v, want %v", i, got, s.wantOffline)
		}
	}
	task, err := f.user.GetTask(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if task.State != api.StateFailed || task.Reason != store.ReasonAgentOffline {
		t.Errorf("task of the offline agent: state %s reason %q", task.State, task.Reason)
	}
	online, _ := f.user.Clients(ctx, false)
	all, _ := f.user.Clients(ctx, true)
	if len(online) != 1 || online[0].PodUID != "uid-b" || len(all) != 2 {
		t.Errorf("clients: online %+v, all %d", online, len(all))
	}
	// The agent comes back: online again, same ID and RegisterTime.
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	online, _ = f.user.Clients(ctx, false)
	if len(online) != 2 {
		t.Errorf("after a new heartbeat: %d online, want 2", len(online))
	}
}

func TestDeadlineExpiry(t *testing.T) { storetest.ForEach(t, testDeadlineExpiry) }

func testDeadlineExpiry(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	ids, _ := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 2")})
	fr, _ := f.agent.Fetch(ctx, "uid-a", 0)
	if len(fr.Tasks) != 1 {
		t.Fatalf("fetch: %+v", fr)
	}
	dl := fr.Tasks[0].Deadline
	// Step toward the deadline in at most 2 s, landing on it exactly: up
	// to and at the deadline the task must not time out. (Stepping over
	// it would expire the task inside the loop, unchecked.)
	for f.clock.Now().Before(dl) {
		f.clock.Add(min(2*time.Second, dl.Sub(f.clock.Now())))
		f.twoAgents() // both keep beating
		res, err := f.srv.Reap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.TimedOut) != 0 {
			t.Fatalf("timed out at %v, not after the deadline %v", f.clock.Now(), dl)
		}
	}
	f.clock.Add(time.Second)
	res, err := f.srv.Reap(ctx)
	if err != nil || len(res.TimedOut) != 1 {
		t.Fatalf("reap after deadline: %+v %v", res, err)
	}
	task, _ := f.user.Task(ctx, ids[0])
	if task.TaskStatus != api.TaskStatusTimedOut || task.TaskReason != store.ReasonDeadlinePassed {
		t.Errorf("task: status %d reason %q", task.TaskStatus, task.TaskReason)
	}
	// The agent is told to stop it.
	hb, _ := f.agent.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1", NodeIP: "10.170.0.10", ResponderAddr: "10.244.1.12:5201", Running: []string{ids[0]}})
	if len(hb.Cancel) != 1 || hb.Cancel[0] != ids[0] {
		t.Errorf("heartbeat reply cancel %v, want [%s]", hb.Cancel, ids[0])
	}
}

func TestLongPollWakeup(t *testing.T) { storetest.ForEach(t, testLongPollWakeup) }

func testLongPollWakeup(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	type res struct {
		fr  api.FetchReply
		err error
		d   time.Duration
	}
	done := make(chan res, 1)
	start := time.Now()
	go func() {
		fr, err := f.agent.Fetch(ctx, "uid-a", 5*time.Second)
		done <- res{fr, err, time.Since(start)}
	}()
	// Whether the poll already waits or not, the task must reach it at
	// once, not after the 5 s wait.
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.fr.Tasks) != 1 || r.fr.Tasks[0].TaskID != ids[0] {
		t.Fatalf("fetch: %+v %v", r.fr, r.err)
	}
	// A missed wake-up answers at the end of the 5 s wait; anything well
	// before it (a busy machine can take a second or two) is the wake-up.
	if r.d >= 4*time.Second {
		t.Errorf("long poll returned after %v of its 5 s wait: the wake-up was missed", r.d)
	}
	// Nothing for b: its poll waits the whole (short) wait and answers empty.
	t0 := time.Now()
	fr, err := f.agent.Fetch(ctx, "uid-b", 300*time.Millisecond)
	if err != nil || len(fr.Tasks) != 0 || time.Since(t0) < 250*time.Millisecond {
		t.Errorf("idle fetch: %+v %v after %v", fr, err, time.Since(t0))
	}
}

func TestReportDedupe(t *testing.T) { storetest.ForEach(t, testReportDedupe) }

func testReportDedupe(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	ids, _ := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if _, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil {
		t.Fatal(err)
	}
	rep := api.Report{TaskID: ids[0], PodUID: "uid-a", ReportID: "r1", State: api.StateSucceeded, TaskResult: "raw"}
	cases := []struct {
		name    string
		rep     api.Report
		wantDup bool
		status  int
	}{
		{"first", rep, false, 0},
		{"retry", rep, true, 0},
		{"same result, another report id", func() api.Report { r := rep; r.ReportID = "r2"; return r }(), true, 0},
		{"another result", func() api.Report { r := rep; r.ReportID = "r2"; r.TaskResult = "other"; return r }(), false, 409},
		{"another agent", func() api.Report { r := rep; r.PodUID = "uid-b"; r.ReportID = "r3"; return r }(), false, 403},
		{"not final", func() api.Report { r := rep; r.State = "running"; return r }(), false, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := f.agent.Report(ctx, c.rep)
			if c.status != 0 {
				if api.StatusOf(err) != c.status {
					t.Fatalf("err %v, want status %d", err, c.status)
				}
				return
			}
			if err != nil || got.Duplicate != c.wantDup || got.State != api.StateSucceeded {
				t.Fatalf("report: %+v %v", got, err)
			}
		})
	}
	task, _ := f.user.GetTask(ctx, ids[0])
	var raw bytes.Buffer
	if _, err := f.user.TaskRaw(ctx, ids[0], &raw); err != nil || raw.String() != "raw" || task.RawSize != 3 {
		t.Errorf("stored output %q (%d bytes) %v", raw.String(), task.RawSize, err)
	}
}

// TestRestart restarts the server on the same database with tasks in
// flight: nothing is lost or doubled.
func TestRestart(t *testing.T) { storetest.ForEach(t, testRestart) }

func testRestart(t *testing.T, dsn string) {
	clock := &fakeClock{t: time.Date(2026, 4, 27, 7, 0, 0, 0, time.UTC)}
	f := newFixture(t, dsn, clock)
	ctx := context.Background()
	f.twoAgents()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1"), pingTask("-c 2"), pingTask("-c 3")})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := f.agent.Fetch(ctx, "uid-a", 0)
	if err != nil || len(fr.Tasks) != 3 {
		t.Fatalf("fetch: %+v %v", fr, err)
	}
	_ = f.agent.Start(ctx, ids[0], "uid-a")
	_ = f.agent.Start(ctx, ids[1], "uid-a")
	rep0 := api.Report{TaskID: ids[0], PodUID: "uid-a", ReportID: "rep-0", State: api.StateSucceeded, TaskResult: "zero"}
	if _, err := f.agent.Report(ctx, rep0); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.flushBeats(ctx); err != nil {
		t.Fatal(err)
	}
	f.close() // the server goes away with tasks 1 and 2 in flight

	clock.Add(2 * time.Second)
	g := newFixture(t, dsn, clock)
	if err := g.srv.seedPending(ctx); err != nil {
		t.Fatal(err)
	}
	g.twoAgents()
	// The agent retries its deliveries: the acked one again (duplicate)
	// and the two that were in flight.
	for i, rep := range []api.Report{rep0,
		{TaskID: ids[1], PodUID: "uid-a", ReportID: "rep-1", State: api.StateSucceeded, TaskResult: "one"},
		{TaskID: ids[2], PodUID: "uid-a", ReportID: "rep-2", State: api.StateFailed, Reason: "ping: exit 2"},
		{TaskID: ids[2], PodUID: "uid-a", ReportID: "rep-2", State: api.StateFailed, Reason: "ping: exit 2"},
	} {
		got, err := g.agent.Report(ctx, rep)
		if err != nil {
			t.Fatalf("report %d after restart: %v", i, err)
		}
		if wantDup := i == 0 || i == 3; got.Duplicate != wantDup {
			t.Errorf("report %d: duplicate %v, want %v", i, got.Duplicate, wantDup)
		}
	}
	page, err := g.user.ListTasks(ctx, client.TaskQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 3 {
		t.Fatalf("%d tasks after restart, want 3", page.Total)
	}
	want := map[string]string{ids[0]: "zero", ids[1]: "one", ids[2]: ""}
	for _, task := range page.Tasks {
		var raw bytes.Buffer
		if _, err := g.user.TaskRaw(ctx, task.TaskID, &raw); err != nil || !api.TerminalState(task.State) || raw.String() != want[task.TaskID] {
			t.Errorf("task %s: state %s output %q %v", task.TaskID, task.State, raw.String(), err)
		}
	}
	// Nothing is handed out twice.
	fr, err = g.agent.Fetch(ctx, "uid-a", 0)
	if err != nil || len(fr.Tasks) != 0 {
		t.Errorf("fetch after restart: %+v %v", fr, err)
	}
	agents, _ := g.user.Agents(ctx, true)
	if len(agents) != 2 {
		t.Errorf("%d agents after restart, want 2", len(agents))
	}
}

func TestV2RunLifecycle(t *testing.T) { storetest.ForEach(t, testV2RunLifecycle) }

func testV2RunLifecycle(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "uid-b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(2 * time.Second)}},
		{Src: "uid-b", Dst: "pod-a", Spec: &probe.Spec{Kind: "rr", Count: 100}},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "ping"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Tasks) != 3 || run.Counts["pending"] != 3 {
		t.Fatalf("run: %+v", run)
	}
	var sp probe.Spec
	_ = json.Unmarshal(run.Tasks[0].Spec, &sp)
	if sp.Target != "10.244.2.7:5201" || !run.Tasks[0].Exclusive {
		t.Errorf("tcp task: target %q exclusive %v", sp.Target, run.Tasks[0].Exclusive)
	}
	_ = json.Unmarshal(run.Tasks[2].Spec, &sp)
	if sp.Target != "10.244.2.7" || run.Tasks[2].Exclusive {
		t.Errorf("ping task: target %q exclusive %v", sp.Target, run.Tasks[2].Exclusive)
	}
	// Agent a gets its two tasks, b its one; a finishes one.
	fa, _ := f.agent.Fetch(ctx, "uid-a", 0)
	fb, _ := f.agent.Fetch(ctx, "uid-b", 0)
	if len(fa.Tasks) != 2 || len(fb.Tasks) != 1 || fa.Tasks[0].Spec == nil {
		t.Fatalf("fetch a %+v b %+v", fa, fb)
	}
	res, _ := json.Marshal(probe.Result{Kind: "ping", RTTms: &probe.Summary{Avg: 0.05, Count: 5}})
	if _, err := f.agent.Report(ctx, api.Report{TaskID: fa.Tasks[1].TaskID, PodUID: "uid-a", ReportID: "x", State: "succeeded", Result: res}); err != nil {
		t.Fatal(err)
	}
	// Listing: filters and paging.
	p1, err := f.user.ListTasks(ctx, client.TaskQuery{Run: run.ID, Limit: 2})
	if err != nil || len(p1.Tasks) != 2 || p1.Total != 3 || p1.NextAfter == 0 {
		t.Fatalf("page 1: %+v %v", p1, err)
	}
	p2, _ := f.user.ListTasks(ctx, client.TaskQuery{Run: run.ID, Limit: 2, After: p1.NextAfter})
	if len(p2.Tasks) != 1 {
		t.Errorf("page 2: %+v", p2)
	}
	ok, _ := f.user.ListTasks(ctx, client.TaskQuery{State: "succeeded"})
	if ok.Total != 1 || len(ok.Tasks[0].Result) == 0 {
		t.Errorf("succeeded: %+v", ok)
	}
	// Cancel the run: the others end cancelled and agents are told.
	got, err := f.user.CancelRun(ctx, run.ID, "enough")
	if err != nil || got.State != api.RunCancelled || got.Counts["cancelled"] != 2 {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	fa, _ = f.agent.Fetch(ctx, "uid-a", 0)
	if len(fa.Cancel) != 1 {
		t.Errorf("agent a cancel list %v", fa.Cancel)
	}
	if _, err := f.user.CancelTask(ctx, run.Tasks[1].TaskID, ""); err != nil {
		t.Errorf("cancel a cancelled task again: %v (want a no-op)", err)
	}
	if _, err := f.user.CancelTask(ctx, run.Tasks[2].TaskID, ""); api.StatusOf(err) != 409 {
		t.Errorf("cancel a finished task: %v, want 409", err)
	}
	runs, err := f.user.ListRuns(ctx, 10, "")
	if err != nil || len(runs.Runs) != 1 {
		t.Errorf("runs: %+v %v", runs, err)
	}
	if _, err := f.user.GetRun(ctx, "nope"); api.StatusOf(err) != 404 {
		t.Errorf("unknown run: %v", err)
	}
}

func TestIperfHandoff(t *testing.T) { storetest.ForEach(t, testIperfHandoff) }

func testIperfHandoff(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{{SrcPodUID: "uid-a", DstPodUID: "uid-b", TaskParam: "-u -b 10M -t 2", TaskType: "iperf"}})
	if err != nil {
		t.Fatal(err)
	}
	fa, _ := f.agent.Fetch(ctx, "uid-a", 0)
	if len(fa.Tasks) != 0 {
		t.Fatalf("source got the iperf task before its server: %+v", fa)
	}
	fb, _ := f.agent.Fetch(ctx, "uid-b", 0)
	if len(fb.Serve) != 1 || fb.Serve[0].TaskID != ids[0] || !fb.Serve[0].UDP || fb.Serve[0].Tool != "iperf" || fb.Serve[0].Bind != "10.244.2.7" {
		t.Fatalf("destination serve request: %+v", fb)
	}
	if err := f.agent.Serving(ctx, ids[0], api.Serving{PodUID: "uid-a", Port: 5999}); api.StatusOf(err) != 403 {
		t.Errorf("serving from the wrong agent: %v", err)
	}
	if err := f.agent.Serving(ctx, ids[0], api.Serving{PodUID: "uid-b", Port: 5999}); err != nil {
		t.Fatal(err)
	}
	fa, _ = f.agent.Fetch(ctx, "uid-a", 0)
	if len(fa.Tasks) != 1 || fa.Tasks[0].DstPort != 5999 {
		t.Fatalf("source after serving: %+v", fa)
	}
}

func TestOpenAPI(t *testing.T) { storetest.ForEach(t, testOpenAPI) }

func testOpenAPI(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	code, body := f.do("GET", "/api/v2/openapi.json", "", nil)
	if code != 200 {
		t.Fatal(code)
	}
	var doc struct {
		OpenAPI    string                    `json:"openapi"`
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	for _, rt := range f.srv.table() {
		if doc.Paths[rt.path][strings.ToLower(rt.method)] == nil {
			t.Errorf("document lacks %s %s", rt.method, rt.path)
		}
	}
	for _, name := range []string{"RunCreate", "TaskV2", "ProbeSpec", "ProbeResult", "Envelope", "Task", "Client"} {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("document lacks schema %s", name)
		}
	}
	// Every $ref resolves.
	for _, m := range regexpRefs.FindAllStringSubmatch(string(body), -1) {
		if doc.Components.Schemas[m[1]] == nil {
			t.Errorf("dangling $ref %s", m[1])
		}
	}
}

var regexpRefs = regexp.MustCompile(`"#/components/schemas/([A-Za-z0-9]+)"`)
