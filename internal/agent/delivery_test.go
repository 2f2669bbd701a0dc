package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
)

// answerDropper sits in front of the server and loses the next fetch
// answer that carries tasks: the server has marked them dispatched, the
// agent never sees them (its connection is closed instead).
type answerDropper struct {
	next   http.Handler
	armed  atomic.Bool
	mu     sync.Mutex // guards lost, at
	lost   []string   // task ids of the lost answer
	at     time.Time  // when it was lost
	starts atomic.Int32
}

func (d *answerDropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && filepath.Base(r.URL.Path) == "start" {
		d.starts.Add(1)
	}
	if r.Method != http.MethodGet || r.URL.Path != "/api/v2/agent/tasks" {
		d.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	d.next.ServeHTTP(rec, r)
	var fr api.FetchReply
	if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &fr) == nil && len(fr.Tasks) > 0 && d.armed.CompareAndSwap(true, false) {
		d.mu.Lock()
		for _, t := range fr.Tasks {
			d.lost = append(d.lost, t.TaskID)
		}
		d.at = time.Now()
		d.mu.Unlock()
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = c.Close()
			return
		}
		http.Error(w, "lost", http.StatusBadGateway)
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// TestLostFetchAnswerIsReoffered: the answer handing a task to its agent
// is lost after the server marked the task dispatched. The agent's
// heartbeats do not list it, so the server re-offers it (same id) and the
// task runs within 5 s of the loss, once.
func TestLostFetchAnswerIsReoffered(t *testing.T) {
	e := newEnv(t)
	e.noSession = true // the polling path (the session's: TestSessionReoffer, internal/server)
	h := e.sw.h.Load()
	drop := &answerDropper{next: *h}
	var dh http.Handler = drop
	e.sw.h.Store(&dh)
	e.agent("a", "127.0.0.2")
	e.agent("b", "127.0.0.3")
	drop.armed.Store(true)
	ctx := context.Background()
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "a", Dst: "b", Spec: &probe.Spec{Kind: "rr", Count: 100}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	got := e.wait(id, 30*time.Second)
	drop.mu.Lock()
	lost, lostAt := drop.lost, drop.at
	drop.mu.Unlock()
	if len(lost) != 1 || lost[0] != id {
		t.Fatalf("lost answer held %v, want task %s: nothing was dropped", lost, id)
	}
	if got.State != api.StateSucceeded || got.StartedAt == nil {
		t.Fatalf("task %s: %s %q started %v", id, got.State, got.Reason, got.StartedAt)
	}
	after := got.StartedAt.Sub(lostAt)
	t.Logf("fetch answer lost; task started %v later (re-offered), state %s", after.Round(time.Millisecond), got.State)
	if after > 5*time.Second {
		t.Errorf("task started %v after its fetch answer was lost, want within 5s", after)
	}
	if n := drop.starts.Load(); n != 1 {
		t.Errorf("agent started the task %d times, want once", n)
	}
}

// TestOutboxOnDisk: a report the server did not take stays in the state
// directory; a new outbox on the same directory loads it, delivers it with
// the same report id and removes the file.
func TestOutboxOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outbox")
	var mu sync.Mutex
	var got []api.Report
	refuse := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
			return
		}
		var rep api.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		got = append(got, rep)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"task_id":"` + rep.TaskID + `","state":"succeeded"}`))
	}))
	defer srv.Close()
	cl, err := client.New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	rep := api.Report{TaskID: "t-1", PodUID: "uid-a", ReportID: "r-1", State: api.StateSucceeded, TaskResult: "raw output", Result: json.RawMessage(`{"kind":"rr"}`)}

	first := newOutbox(cl, testLogger(t), dir)
	if err := first.load(); err != nil {
		t.Fatal(err)
	}
	first.add(rep)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); first.run(ctx) }()
	time.Sleep(300 * time.Millisecond) // at least one refused attempt
	cancel()
	<-done
	files, _ := filepath.Glob(filepath.Join(dir, "*"+outboxFileSuffix))
	if len(files) != 1 {
		t.Fatalf("outbox files after a refused delivery: %v, want 1", files)
	}
	// A stray temporary file (a write cut short) and a corrupt report are
	// not delivered.
	_ = os.WriteFile(filepath.Join(dir, "x.report.json.tmp"), []byte("{"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "bad"+outboxFileSuffix), []byte("{"), 0o600)

	mu.Lock()
	refuse = false
	mu.Unlock()
	second := newOutbox(cl, testLogger(t), dir)
	if err := second.load(); err != nil {
		t.Fatal(err)
	}
	if !second.holds("t-1") || len(second.taskIDs(10)) != 1 {
		t.Fatalf("loaded outbox holds %v, want [t-1]", second.taskIDs(10))
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go second.run(ctx)
	second.drain(5 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].ReportID != "r-1" || got[0].TaskResult != "raw output" || !bytes.Equal(got[0].Result, rep.Result) {
		t.Fatalf("delivered %+v, want the one report r-1 as written", got)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+outboxFileSuffix)); len(files) != 0 {
		t.Errorf("outbox files after delivery: %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad"+outboxFileSuffix+".bad")); err != nil {
		t.Errorf("corrupt report not moved aside: %v", err)
	}
}

// TestOutboxKeepsRefusedResults: a result the server refuses for good (409,
// 404, 403) is not deleted: it moves to the outbox's dead-letter
// directory, whole, and is not retried; a result it acknowledges is
// deleted; a 5xx is retried.
func TestOutboxKeepsRefusedResults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outbox")
	var mu sync.Mutex
	tries := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep api.Report
		_ = json.NewDecoder(r.Body).Decode(&rep)
		mu.Lock()
		tries[rep.TaskID]++
		n := tries[rep.TaskID]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case rep.TaskID == "t-409":
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"conflict: task already cancelled"}`))
		case rep.TaskID == "t-404":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not found"}`))
		case rep.TaskID == "t-503" && n < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"busy"}`))
		default:
			_, _ = w.Write([]byte(`{"task_id":"` + rep.TaskID + `","state":"succeeded"}`))
		}
	}))
	defer srv.Close()
	cl, err := client.New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	o := newOutbox(cl, testLogger(t), dir)
	if err := o.load(); err != nil {
		t.Fatal(err)
	}
	reps := map[string]api.Report{}
	for _, id := range []string{"t-409", "t-404", "t-503", "t-ok"} {
		rep := api.Report{TaskID: id, PodUID: "uid-a", ReportID: "r-" + id, State: api.StateSucceeded, TaskResult: "output of " + id}
		reps[id] = rep
		o.add(rep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.run(ctx)
	o.drain(10 * time.Second)
	if n := o.len(); n != 0 {
		t.Fatalf("%d reports still queued", n)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+outboxFileSuffix)); len(files) != 0 {
		t.Errorf("outbox files after delivery: %v, want none", files)
	}
	for _, id := range []string{"t-409", "t-404"} {
		b, err := os.ReadFile(filepath.Join(dir, deadLetterDir, "r-"+id+outboxFileSuffix))
		if err != nil {
			t.Errorf("refused report %s not kept: %v", id, err)
			continue
		}
		var got api.Report
		if err := json.Unmarshal(b, &got); err != nil || got.TaskResult != reps[id].TaskResult || got.ReportID != reps[id].ReportID {
			t.Errorf("dead letter of %s: %+v (%v), want the report as written", id, got, err)
		}
	}
	if dead, _ := filepath.Glob(filepath.Join(dir, deadLetterDir, "*")); len(dead) != 2 {
		t.Errorf("dead letters %v, want the two refused reports", dead)
	}
	mu.Lock()
	defer mu.Unlock()
	if tries["t-409"] != 1 || tries["t-404"] != 1 || tries["t-503"] != 3 || tries["t-ok"] != 1 {
		t.Errorf("attempts %v, want one per refused or acknowledged report and 3 for the one answered 503 twice", tries)
	}
	// A new process does not deliver dead letters again by itself.
	again := newOutbox(cl, testLogger(t), dir)
	if err := again.load(); err != nil || again.len() != 0 {
		t.Errorf("outbox loaded after a restart holds %d (%v), want 0", again.len(), err)
	}
}

// fetchRefuser answers every fetch 503 (a server whose store cannot
// write) and counts them; the rest goes to the server.
type fetchRefuser struct {
	next    http.Handler
	fetches atomic.Int32
}

func (f *fetchRefuser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/api/v2/agent/tasks" {
		f.fetches.Add(1)
		w.Header().Set("Retry-After", "5")
		http.Error(w, `{"error":"store cannot write: disk full"}`, http.StatusServiceUnavailable)
		return
	}
	f.next.ServeHTTP(w, r)
}

// TestFailedFetchesBackOff: a polling agent whose fetches fail backs off
// (250 ms, doubling), not asking again at once: over 2 s it fetches a
// handful of times, not hundreds (make bench-chaos found 600 a second
// from 8 agents while the store's disk was full).
func TestFailedFetchesBackOff(t *testing.T) {
	e := newEnv(t)
	e.noSession = true
	e.agent("a", "127.0.0.2")
	refuse := &fetchRefuser{next: *e.sw.h.Load()}
	var h http.Handler = refuse
	e.sw.h.Store(&h)
	time.Sleep(2 * time.Second)
	// 250 ms + 500 ms + 1 s of back-off fit in 2 s: at most 4 fetches
	// (5 with one under way when the refusals began), however fast or
	// slow the machine.
	if n := refuse.fetches.Load(); n > 5 {
		t.Errorf("%d fetches in 2 s while each was refused 503, want at most 5 (backing off)", n)
	} else {
		t.Logf("%d fetches in 2 s while each was refused", n)
	}
}

// unreachable is a reporter whose server never answers: every report
// fails after a millisecond.
type unreachable struct{}

func (unreachable) Report(context.Context, api.Report) (api.ReportReply, error) {
	time.Sleep(time.Millisecond)
	return api.ReportReply{}, errors.New("connection refused")
}

// TestOutboxDrainWhileRetrying: drain (the agent's shutdown) asks for
// retries at once while the delivery loop schedules them; with -race the
// two must not touch a report's schedule unsynchronised (it raced beside
// a CPU hog). Many failing reports keep the loop busy through drain.
func TestOutboxDrainWhileRetrying(t *testing.T) {
	o := newOutbox(unreachable{}, testLogger(t), "")
	for i := range 100 {
		o.add(api.Report{TaskID: fmt.Sprintf("t-%d", i), PodUID: "uid-a", ReportID: fmt.Sprintf("r-%d", i), State: api.StateSucceeded})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.run(ctx) }()
	o.drain(time.Second)
	cancel()
	<-done
	if n := o.len(); n != 100 {
		t.Errorf("%d reports queued after failed deliveries, want all 100 kept", n)
	}
}
