package server

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestBadAgentInput: the agent endpoints refuse bad input with a 4xx that
// names the problem, and store nothing.
func TestBadAgentInput(t *testing.T) { storetest.ForEach(t, testBadAgentInput) }

func testBadAgentInput(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	id := f.dispatchedTask()
	ctx := context.Background()
	hb := func(mod func(*api.Heartbeat)) []byte {
		h := api.Heartbeat{PodUID: "uid-new", PodName: "pod-new", PodIP: "10.244.3.3", NodeName: "node-3"}
		mod(&h)
		b, _ := json.Marshal(h)
		return b
	}
	rep := func(mod func(*api.Report)) []byte {
		r := api.Report{TaskID: id, PodUID: "uid-a", ReportID: "r", State: api.StateSucceeded}
		mod(&r)
		b, _ := json.Marshal(r)
		return b
	}
	huge := append([]byte(`{"task_id":"`+id+`","pod_uid":"uid-a","report_id":"r","state":"succeeded","task_result":"`), bytes.Repeat([]byte("x"), api.MaxReportBody+10)...)
	huge = append(huge, `"}`...)
	cases := []struct {
		name, method, path string
		body               []byte
		want               int
		msg                string
	}{
		{"heartbeat malformed", "POST", "/api/v2/agent/heartbeat", []byte(`{"pod_uid":`), 400, "malformed JSON"},
		{"heartbeat v1 malformed", "POST", "/api/v1/internal/heartbeat", []byte(`[1,2`), 400, "malformed JSON"},
		{"heartbeat no uid", "POST", "/api/v2/agent/heartbeat", hb(func(h *api.Heartbeat) { h.PodUID = "" }), 400, "pod_uid"},
		{"heartbeat bad ip", "POST", "/api/v2/agent/heartbeat", hb(func(h *api.Heartbeat) { h.PodIP = "10.244.3" }), 400, "pod_ip"},
		{"heartbeat bad responder", "POST", "/api/v2/agent/heartbeat", hb(func(h *api.Heartbeat) { h.ResponderAddr = "nope" }), 400, "responder_addr"},
		{"heartbeat bad responder key", "POST", "/api/v2/agent/heartbeat", hb(func(h *api.Heartbeat) { h.ResponderKey = "abc" }), 400, "responder_key"},
		{"heartbeat unknown field", "POST", "/api/v2/agent/heartbeat", []byte(`{"pod_uid":"x","cpu":1}`), 400, "cpu"},
		{"heartbeat huge", "POST", "/api/v2/agent/heartbeat", append([]byte(`{"pod_name":"`), bytes.Repeat([]byte("x"), api.MaxBody+1)...), 413, "body larger than"},
		{"get_tasks no uid", "GET", "/api/v1/internal/get_tasks", nil, 400, "pod_uid"},
		{"fetch bad wait", "GET", "/api/v2/agent/tasks?pod_uid=uid-a&wait=soon", nil, 400, "wait"},
		{"report malformed", "POST", "/api/v1/internal/report_task", []byte(`{"task_id":1}`), 400, "task_id"},
		{"report unknown task", "POST", "/api/v1/internal/report_task", rep(func(r *api.Report) { r.TaskID = "no-such-task" }), 404, "not found"},
		{"report other agent", "POST", "/api/v1/internal/report_task", rep(func(r *api.Report) { r.PodUID = "uid-b" }), 403, "belongs to agent"},
		{"report bad status", "POST", "/api/v1/internal/report_task", rep(func(r *api.Report) { r.State = ""; r.TaskStatus = 2 }), 400, "task_status"},
		{"report result not JSON", "POST", "/api/v2/agent/tasks/" + id + "/report", []byte(`{"pod_uid":"uid-a","report_id":"r","state":"succeeded","result":"x"`), 400, "malformed JSON"},
		{"report id mismatch", "POST", "/api/v2/agent/tasks/other/report", rep(func(*api.Report) {}), 400, "task_id"},
		{"report huge", "POST", "/api/v1/internal/report_task", huge, 413, "body larger than"},
		{"start other agent", "POST", "/api/v2/agent/tasks/" + id + "/start", []byte(`{"pod_uid":"uid-b"}`), 403, "belongs to agent"},
		{"serving bad port", "POST", "/api/v2/agent/tasks/" + id + "/serving", []byte(`{"pod_uid":"uid-b","port":70000}`), 400, "port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, agentTok, c.body)
			if code != c.want || !strings.Contains(string(body), c.msg) {
				t.Errorf("%s %s: %d %.300s; want %d naming %q", c.method, c.path, code, body, c.want, c.msg)
			}
		})
	}
	// Nothing was stored: no new agent, the task still dispatched without
	// a result, no new task.
	as, _ := f.st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if len(as) != 2 {
		t.Errorf("%d agents after refused heartbeats, want 2", len(as))
	}
	task, err := f.st.GetTask(ctx, id)
	if err != nil || task.State != store.TaskDispatched || task.ReportID != "" || task.RawSize != 0 {
		t.Errorf("task after refused reports: %s report %q %v", task.State, task.ReportID, err)
	}
	if n := f.taskTotal(); n != 1 {
		t.Errorf("%d tasks, want 1", n)
	}
}

// TestBadRunInput: v2 tool tasks get the same allow-list checks as v1
// ones, and a run with one bad task stores nothing.
func TestBadRunInput(t *testing.T) { storetest.ForEach(t, testBadRunInput) }

func testBadRunInput(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.twoAgents()
	cases := []struct{ name, body, msg string }{
		{"shell metacharacter", `{"tasks":[{"src":"pod-a","dst":"pod-b","type":"ping","param":"-c 1 && reboot"}]}`, "tasks[0].param"},
		{"flag outside allow-list", `{"tasks":[{"src":"pod-a","dst":"pod-b","type":"iperf3","param":"-t 1 --logfile out"}]}`, "flag --logfile not allowed"},
		{"unknown type", `{"tasks":[{"src":"pod-a","dst":"pod-b","type":"nmap"}]}`, `unknown task type \"nmap\"`},
		{"spec on a tool task", `{"tasks":[{"src":"pod-a","dst":"pod-b","type":"ping","spec":{"kind":"tcp"}}]}`, "tasks[0].spec"},
		{"second task bad", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"}},{"src":"pod-a","dst":"pod-b","type":"ping","param":"-c 1 $(id)"}]}`, "tasks[1].param"},
		{"unknown pod", `{"tasks":[{"src":"pod-a","dst":"no-such-pod","spec":{"kind":"rr"}}]}`, "no-such-pod"},
		{"malformed", `{"tasks":[{"src":"pod-a"`, "malformed JSON"},
		{"negative timeout", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"},"timeout":-1}]}`, "timeout"},
		{"via not an address", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"},"via":"svc.example:5201"}]}`, "tasks[0].via"},
		{"via on another port", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"rr"},"via":"10.96.1.2:22"}]}`, "not the destination responder's port 5201"},
		{"via on a ping", `{"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"ping"},"via":"10.96.1.2:5201"}]}`, "tasks[0].via"},
		{"via on a tool task", `{"tasks":[{"src":"pod-a","dst":"pod-b","type":"ping","param":"-c 1","via":"10.96.1.2:5201"}]}`, "tasks[0].via"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do("POST", "/api/v2/runs", userTok, []byte(c.body))
			if code != 400 || !strings.Contains(string(body), c.msg) {
				t.Errorf("%d %.300s; want 400 naming %q", code, body, c.msg)
			}
		})
	}
	if n := f.taskTotal(); n != 0 {
		t.Errorf("%d tasks stored by refused runs", n)
	}
	runs, total, _ := f.st.ListRuns(context.Background(), store.RunFilter{}, store.Page{})
	if total != 0 {
		t.Errorf("%d runs stored by refused requests: %v", total, runs)
	}
}
