package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestStoreHygiene: NUL and invalid UTF-8 in any body field, path or
// query parameter are refused with 400 naming where, on both stores (on
// PostgreSQL they answered 500), and nothing is stored.
func TestStoreHygiene(t *testing.T) { storetest.ForEach(t, testStoreHygiene) }

func testStoreHygiene(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	id := f.dispatchedTask()
	ctx := context.Background()
	hb := `{"pod_uid":"uid-x","pod_name":"pod-x","pod_ip":"10.244.3.3","node_name":"node-3"}`
	cases := []struct {
		name, method, path, token, body string
		field                           string
	}{
		{"heartbeat uid NUL", "POST", "/api/v2/agent/heartbeat", agentTok, strings.Replace(hb, "uid-x", `uid\u0000x`, 1), "pod_uid"},
		{"heartbeat v1 name bad UTF-8", "POST", "/api/v1/internal/heartbeat", agentTok, strings.Replace(hb, "pod-x", "pod\xffx", 1), "(body)"},
		{"heartbeat node NUL", "POST", "/api/v2/agent/heartbeat", agentTok, strings.Replace(hb, "node-3", `n\u0000`, 1), "node_name"},
		{"get_tasks uid NUL", "GET", "/api/v1/internal/get_tasks?pod_uid=uid-a%00", agentTok, "", "pod_uid"},
		{"fetch uid bad UTF-8", "GET", "/api/v2/agent/tasks?pod_uid=%ff", agentTok, "", "pod_uid"},
		{"start uid NUL", "POST", "/api/v2/agent/tasks/" + id + "/start", agentTok, `{"pod_uid":"uid-a\u0000"}`, "pod_uid"},
		{"start path NUL", "POST", "/api/v2/agent/tasks/" + id + "%00/start", agentTok, `{"pod_uid":"uid-a"}`, "(path)"},
		{"report result NUL", "POST", "/api/v1/internal/report_task", agentTok, `{"task_id":"` + id + `","pod_uid":"uid-a","report_id":"r","state":"succeeded","task_result":"PING\u0000"}`, "task_result"},
		{"report typed result NUL", "POST", "/api/v2/agent/tasks/" + id + "/report", agentTok, `{"pod_uid":"uid-a","report_id":"r","state":"succeeded","result":{"kind":"ping","notes":["\u0000"]}}`, "result.notes[0]"},
		{"report reason bad UTF-8", "POST", "/api/v2/agent/tasks/" + id + "/report", agentTok, "{\"pod_uid\":\"uid-a\",\"report_id\":\"r\",\"state\":\"failed\",\"reason\":\"\xc3\"}", "(body)"},
		{"create param NUL", "POST", "/api/v1/external/task/create", userTok, `[{"src_pod_uid":"uid-a","dst_pod_uid":"uid-b","task_type":"ping","task_param":"-c\u00001"}]`, "[0].task_param"},
		{"create uid bad UTF-8", "POST", "/api/v1/external/task/create", userTok, "[{\"src_pod_uid\":\"uid-a\xfe\",\"dst_pod_uid\":\"uid-b\",\"task_type\":\"ping\"}]", "(body)"},
		{"run suite NUL", "POST", "/api/v2/runs", userTok, `{"suite":"base\u0000","tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"ping","count":1}}]}`, "suite"},
		{"run params NUL", "POST", "/api/v2/runs", userTok, `{"params":{"k":"\u0000"},"tasks":[{"src":"pod-a","dst":"pod-b","spec":{"kind":"ping","count":1}}]}`, "params.k"},
		{"v1 task id NUL", "GET", "/api/v1/external/task?task_id=%00", userTok, "", "task_id"},
		{"task path bad UTF-8", "GET", "/api/v2/tasks/%ff%fe", userTok, "", "(path)"},
		{"run path NUL", "GET", "/api/v2/runs/%00", userTok, "", "(path)"},
		{"task list run NUL", "GET", "/api/v2/tasks?run=%00", userTok, "", "run"},
		{"task list agent bad UTF-8", "GET", "/api/v2/tasks?agent=uid%ff", userTok, "", "agent"},
		{"run list suite NUL", "GET", "/api/v2/runs?suite=a%00b", userTok, "", "suite"},
		{"agents node bad UTF-8", "GET", "/api/v2/agents?node=%c3", userTok, "", "node"},
		{"cancel reason NUL", "POST", "/api/v2/tasks/" + id + "/cancel", userTok, `{"reason":"\u0000"}`, "reason"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, c.token, []byte(c.body))
			if code != 400 || !strings.Contains(string(body), c.field) {
				t.Errorf("%s %s: %d %.300s; want 400 naming %q", c.method, c.path, code, body, c.field)
			}
		})
	}
	as, _ := f.st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if len(as) != 2 {
		t.Errorf("%d agents after refused heartbeats, want 2", len(as))
	}
	task, err := f.st.GetTask(ctx, id)
	if err != nil || task.State != store.TaskDispatched || task.RawSize != 0 {
		t.Errorf("task after refused reports and cancel: %s %d bytes %v", task.State, task.RawSize, err)
	}
	if n := f.taskTotal(); n != 1 {
		t.Errorf("%d tasks, want 1", n)
	}
	if _, total, _ := f.st.ListRuns(ctx, store.RunFilter{}, store.Page{}); total != 0 {
		t.Errorf("%d runs stored by refused requests", total)
	}
}

// unwritable is a store that reads but cannot write, as a full disk makes
// it.
type unwritable struct{ store.Store }

func (unwritable) CheckWrite(context.Context) error {
	return errors.New("write probe: database or disk is full (13)")
}

// TestReadyzNeedsWrites: /readyz answers 503 when the store answers reads
// but refuses writes, and 200 when it writes.
func TestReadyzNeedsWrites(t *testing.T) { storetest.ForEach(t, testReadyzNeedsWrites) }

func testReadyzNeedsWrites(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	if code, body := f.do("GET", "/readyz", "", nil); code != 200 {
		t.Fatalf("readyz of a writable store: %d %s", code, body)
	}
	srv, err := New(Options{Store: unwritable{f.st}, UserToken: userTok, AgentToken: agentTok,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "disk is full") {
		t.Errorf("readyz of a store that cannot write: %d %s; want 503 saying why", rec.Code, rec.Body)
	}
}
