package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// heldOutputs is a store whose output reads wait until released, counting
// the reads in flight: the hook that shows how many run at once.
type heldOutputs struct {
	store.Store
	gate          chan struct{}
	inFlight, top atomic.Int32
}

func (h *heldOutputs) TaskOutputChunk(ctx context.Context, id string, off, n int64) (string, error) {
	cur := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for {
		old := h.top.Load()
		if cur <= old || h.top.CompareAndSwap(old, cur) {
			break
		}
	}
	select {
	case <-h.gate:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return h.Store.TaskOutputChunk(ctx, id, off, n)
}

// TestRawOutputReadsBounded: 12 reads of a raw output at once (v1 task
// answers and v2 raw reads) while the store is slow: at most rawReadSlots
// read the store at once, the others are answered 503 with Retry-After
// after a short wait, and every read served returns the whole output,
// intact, read in many chunks (multi-byte characters and JSON escapes
// across chunk boundaries).
func TestRawOutputReadsBounded(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	ctx := context.Background()
	id := f.dispatchedTask()
	raw := strings.Repeat("64 bytes from 10.244.2.7: é ✓ 𝄞 <&> \"q\" \\ \t\n", 1000)
	if _, err := f.agent.Report(ctx, api.Report{TaskID: id, PodUID: "uid-a", ReportID: "r", State: api.StateSucceeded, TaskResult: raw}); err != nil {
		t.Fatal(err)
	}
	held := &heldOutputs{Store: f.st, gate: make(chan struct{})}
	var release sync.Once
	open := func() { release.Do(func() { close(held.gate) }) }
	t.Cleanup(open) // before the fixture closes: no read stays held
	f.srv.st = held
	f.srv.raw.wait = 300 * time.Millisecond
	f.srv.raw.chunk = 1000 // characters: some 45 chunks

	const reads = 12
	type answer struct {
		v1         bool
		code       int
		retryAfter string
		body       []byte
	}
	answers := make(chan answer, reads)
	var wg sync.WaitGroup
	for i := range reads {
		v1 := i%2 == 0
		path := "/api/v2/tasks/" + id + "/raw"
		if v1 {
			path = "/api/v1/external/task?task_id=" + id
		}
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, f.ts.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+userTok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("read body: %v", err)
			}
			answers <- answer{v1, resp.StatusCode, resp.Header.Get("Retry-After"), b}
		})
	}
	// The refused come back while the store still holds the others.
	refused := 0
	for refused < reads-rawReadSlots {
		select {
		case a := <-answers:
			if a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
				t.Fatalf("answer while %d reads hold the store: %d Retry-After %q: %s", held.inFlight.Load(), a.code, a.retryAfter, a.body)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d reads refused in 10 s, want %d", refused, reads-rawReadSlots)
		}
	}
	if n := held.inFlight.Load(); n != rawReadSlots {
		t.Errorf("%d reads in the store while the others were refused, want %d", n, rawReadSlots)
	}
	open()
	wg.Wait()
	close(answers)
	served := 0
	for a := range answers {
		if a.code != http.StatusOK {
			t.Errorf("read with a slot: %d %s", a.code, a.body)
			continue
		}
		served++
		got := string(a.body)
		if a.v1 {
			var env struct {
				Status int      `json:"status"`
				Data   api.Task `json:"data"`
			}
			if err := json.Unmarshal(a.body, &env); err != nil {
				t.Errorf("v1 answer is not JSON: %v", err)
				continue
			}
			got = env.Data.TaskResult
			if env.Data.TaskID != id || env.Data.TaskStatus != api.TaskStatusFinished {
				t.Errorf("v1 answer: task %s status %d", env.Data.TaskID, env.Data.TaskStatus)
			}
		}
		if got != raw {
			t.Errorf("output read (v1 %v): %d bytes, want the %d-byte output intact", a.v1, len(got), len(raw))
		}
	}
	if served != rawReadSlots || held.top.Load() > rawReadSlots {
		t.Errorf("served %d reads, at most %d at once in the store; want %d, at most %d", served, held.top.Load(), rawReadSlots, rawReadSlots)
	}
}
