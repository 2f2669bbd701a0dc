package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestBoundedAnswers: raw tool output is stored apart from the typed
// result (also when an agent sends it inside the result), run and list
// answers carry summaries with raw_size and page the run's tasks, and a
// raw output is read on its own.
func TestBoundedAnswers(t *testing.T) { storetest.ForEach(t, testBoundedAnswers) }

func testBoundedAnswers(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.twoAgents()
	const n = 5
	rc := api.RunCreate{}
	for range n {
		rc.Tasks = append(rc.Tasks, api.RunTask{Src: "uid-a", Dst: "uid-b", Type: api.TypePing, Param: "-c 1"})
	}
	run, err := f.user.CreateRun(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("64 bytes from 10.244.2.7: icmp_seq=1 ttl=64 time=0.05 ms\n", 2000)
	outputs := map[string]string{}
	for i, task := range run.Tasks {
		rep := api.Report{TaskID: task.TaskID, PodUID: "uid-a", ReportID: "r" + task.TaskID, State: api.StateSucceeded}
		out := big + task.TaskID
		switch i {
		case 0: // an old agent: the output only inside the typed result
			b, _ := json.Marshal(map[string]any{"kind": "ping", "raw": out})
			rep.Result = b
		case 1: // no output at all
			out = ""
			rep.Result = json.RawMessage(`{"kind":"ping"}`)
		default: // the output once, beside a typed result that also holds it
			b, _ := json.Marshal(map[string]any{"kind": "ping", "raw": out})
			rep.TaskResult, rep.Result = out, b
		}
		outputs[task.TaskID] = out
		if _, err := f.agent.Report(ctx, rep); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}

	// Pages of 2: 2, 2, 1 tasks; summaries only.
	var got []api.TaskV2
	var after int64
	for page := 0; ; page++ {
		p, err := f.user.GetRunPage(ctx, run.ID, 2, after)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Tasks) > 2 || p.Counts[api.StateSucceeded] != n {
			t.Fatalf("page %d: %d tasks, counts %v", page, len(p.Tasks), p.Counts)
		}
		got = append(got, p.Tasks...)
		if p.TasksNextAfter == 0 {
			break
		}
		after = p.TasksNextAfter
	}
	whole, err := f.user.GetRun(ctx, run.ID)
	if err != nil || len(got) != n || len(whole.Tasks) != n {
		t.Fatalf("paged %d tasks, whole %d (%v), want %d", len(got), len(whole.Tasks), err, n)
	}
	for _, task := range got {
		want := outputs[task.TaskID]
		if task.RawSize != int64(len(want)) || bytes.Contains(task.Result, []byte(`"raw"`)) {
			t.Errorf("task %s: raw_size %d (want %d), result %.80s", task.TaskID, task.RawSize, len(want), task.Result)
		}
		var raw bytes.Buffer
		if _, err := f.user.TaskRaw(ctx, task.TaskID, &raw); err != nil || raw.String() != want {
			t.Errorf("raw of %s: %d bytes %v, want %d", task.TaskID, raw.Len(), err, len(want))
		}
		v1, err := f.user.Task(ctx, task.TaskID)
		if err != nil || v1.TaskResult != want {
			t.Errorf("v1 task %s: TaskResult of %d bytes %v, want the raw output (%d)", task.TaskID, len(v1.TaskResult), err, len(want))
		}
	}
	// Nothing raw in any answer but its own.
	for _, path := range []string{"/api/v2/runs/" + run.ID, "/api/v2/tasks?run=" + run.ID, "/api/v2/tasks/" + got[0].TaskID} {
		code, body := f.do("GET", path, userTok, nil)
		if code != http.StatusOK || len(body) > 16<<10 || bytes.Contains(body, []byte("icmp_seq")) {
			t.Errorf("GET %s: %d, %d bytes (raw output inside: %v)", path, code, len(body), bytes.Contains(body, []byte("icmp_seq")))
		}
	}
	cases := []struct {
		name, path string
		status     int
	}{
		{"unknown task", "/api/v2/tasks/no-such-task/raw", http.StatusNotFound},
		{"page too big", "/api/v2/runs/" + run.ID + "?limit=1001", http.StatusBadRequest},
		{"bad after", "/api/v2/runs/" + run.ID + "?after=x", http.StatusBadRequest},
		{"raw without token", "", http.StatusUnauthorized},
	}
	for _, c := range cases {
		tok := userTok
		if c.path == "" {
			c.path, tok = "/api/v2/tasks/"+got[0].TaskID+"/raw", ""
		}
		if code, body := f.do("GET", c.path, tok, nil); code != c.status {
			t.Errorf("%s: GET %s: %d %s, want %d", c.name, c.path, code, body, c.status)
		}
	}
}

// TestBigReportsAreGated: while the big-report slots are taken, a report
// of 1 MiB or more waits (here until its request ends) and a small one
// does not; once a slot frees, the big one is stored.
func TestBigReportsAreGated(t *testing.T) {
	f := newFixture(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"), nil)
	ctx := context.Background()
	f.twoAgents()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1"), pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil {
		t.Fatal(err)
	}
	for range bigReportSlots {
		f.srv.bigReports <- struct{}{}
	}
	big := api.Report{TaskID: ids[0], PodUID: "uid-a", ReportID: "big", State: api.StateSucceeded, TaskResult: strings.Repeat("x", bigReportBody)}
	small := api.Report{TaskID: ids[1], PodUID: "uid-a", ReportID: "small", State: api.StateSucceeded, TaskResult: "ok"}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = f.agent.Report(wctx, big)
	cancel()
	if err == nil {
		t.Fatal("big report stored while every slot was taken")
	}
	if _, err := f.agent.Report(ctx, small); err != nil {
		t.Fatalf("small report waited for a big-report slot: %v", err)
	}
	<-f.srv.bigReports
	if rep, err := f.agent.Report(ctx, big); err != nil || rep.Duplicate {
		t.Fatalf("big report with a free slot: %+v %v", rep, err)
	}
}
