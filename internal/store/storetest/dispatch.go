package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

func testDedupe(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "dd-src", "dd-n1", at(0))
	beat(t, st, "dd-dst", "dd-n2", at(0))
	task := create(t, st, mkTask("dd-src", "dd-dst", "ping"))[0]
	if _, err := st.ClaimTasks(ctx, "dd-src", at(1), 10, time.Second); err != nil {
		t.Fatal(err)
	}
	rep := store.Report{TaskID: task.TaskID, AgentUID: "dd-src", ReportID: "rep-a", State: store.TaskFailed, Reason: "exit 2", RawResult: "first"}
	cases := []struct {
		name    string
		rep     store.Report
		wantDup bool
		wantErr error
	}{
		{"first", rep, false, nil},
		{"same report again", rep, true, nil},
		{"same report id, other text", func() store.Report { r := rep; r.RawResult = "second"; return r }(), true, nil},
		{"other report id, same result", func() store.Report { r := rep; r.ReportID = "rep-b"; return r }(), true, nil},
		{"other report id, other result", func() store.Report { r := rep; r.ReportID = "rep-b"; r.RawResult = "second"; return r }(), false, store.ErrConflict},
		{"other report id, other state", func() store.Report { r := rep; r.ReportID = "rep-b"; r.State = store.TaskSucceeded; return r }(), false, store.ErrConflict},
		{"other agent", func() store.Report { r := rep; r.AgentUID = "dd-dst"; r.ReportID = "rep-c"; return r }(), false, store.ErrNotFound},
		{"no report id", func() store.Report { r := rep; r.ReportID = ""; return r }(), false, store.ErrInvalid},
		{"not final", func() store.Report { r := rep; r.State = store.TaskRunning; return r }(), false, store.ErrInvalid},
	}
	for _, c := range cases {
		got, dup, err := st.Complete(ctx, c.rep, at(5))
		if c.wantErr != nil {
			wantErr(t, c.name, err, c.wantErr)
			continue
		}
		if err != nil || dup != c.wantDup || got.RawSize != int64(len("first")) || got.State != store.TaskFailed || got.Reason != "exit 2" {
			t.Errorf("%s: %+v dup=%v %v", c.name, got, dup, err)
		}
		if raw, err := st.TaskOutput(ctx, task.TaskID); raw != "first" || err != nil {
			t.Errorf("%s: stored output %q %v", c.name, raw, err)
		}
	}
}

func testConcurrentClaims(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "cc-src", "cc-n1", at(0))
	beat(t, st, "cc-dst", "cc-n2", at(0))
	const n = 60
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = mkTask("cc-src", "cc-dst", "ping")
	}
	create(t, st, tasks...)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				got, err := st.ClaimTasks(ctx, "cc-src", at(1), 7, time.Second)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				for _, g := range got {
					seen[g.TaskID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d of %d tasks claimed", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("task %s claimed %d times", id, c)
		}
	}
}

func testExclusive(t *testing.T, st store.Store) {
	ctx := context.Background()
	// Two sources on nodes ex-1 and ex-2, both measuring toward ex-3.
	beat(t, st, "ex-a", "ex-1", at(0))
	beat(t, st, "ex-b", "ex-2", at(0))
	beat(t, st, "ex-c", "ex-3", at(0))
	beat(t, st, "ex-d", "ex-4", at(0))
	excl := func(src, dst string) store.Task {
		tk := mkTask(src, dst, "iperf3")
		tk.Exclusive = true
		return tk
	}
	ts := create(t, st, excl("ex-a", "ex-c"), excl("ex-b", "ex-c"), mkTask("ex-b", "ex-c", "ping"), excl("ex-b", "ex-d"))
	a, _ := st.ClaimTasks(ctx, "ex-a", at(1), 10, time.Second)
	b, _ := st.ClaimTasks(ctx, "ex-b", at(1), 10, time.Second)
	got := map[string]bool{}
	for _, x := range append(a, b...) {
		got[x.TaskID] = true
	}
	// a→c runs; b→c waits (node ex-3 busy); the ping is not exclusive;
	// b→d shares no node with a→c.
	want := map[string]bool{ts[0].TaskID: true, ts[2].TaskID: true, ts[3].TaskID: true}
	if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
		t.Fatalf("claimed %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "ex-a", ReportID: "x", State: store.TaskSucceeded}, at(2)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[3].TaskID, AgentUID: "ex-b", ReportID: "y", State: store.TaskSucceeded}, at(2)); err != nil {
		t.Fatal(err)
	}
	b, _ = st.ClaimTasks(ctx, "ex-b", at(3), 10, time.Second)
	if len(b) != 1 || b[0].TaskID != ts[1].TaskID {
		t.Errorf("after the node freed: %v", b)
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func testOfflineAndDeadlines(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "od-src", "od-n1", at(0))
	beat(t, st, "od-dst", "od-n2", at(0))
	ts := create(t, st, mkTask("od-src", "od-dst", "ping"), mkTask("od-src", "od-dst", "ping"), mkTask("od-src", "od-dst", "ping"))
	got, _ := st.ClaimTasks(ctx, "od-src", at(1), 2, 5*time.Second) // deadline 1+20+5 = 26 s
	if len(got) != 2 {
		t.Fatalf("claimed %d", len(got))
	}
	if _, err := st.MarkRunning(ctx, got[0].TaskID, "od-src", at(2)); err != nil {
		t.Fatal(err)
	}
	// ExpireDeadlines works on the whole database: look at this test's
	// tasks only.
	exp, err := st.ExpireDeadlines(ctx, at(26))
	if mine := ofSource(exp, "od-src"); err != nil || len(mine) != 0 {
		t.Errorf("expired at the deadline itself: %d tasks (%v)", len(mine), err)
	}
	exp, err = st.ExpireDeadlines(ctx, at(26.001))
	mine := ofSource(exp, "od-src")
	if err != nil || len(mine) != 2 {
		t.Fatalf("expired after the deadline: %d tasks (%v), want 2", len(mine), err)
	}
	for _, e := range mine {
		if e.State != store.TaskTimedOut || e.Reason != store.ReasonDeadlinePassed || !e.FinishedAt.Equal(at(26.001)) {
			t.Errorf("expired task %s: %s %q finished %v", e.TaskID, e.State, e.Reason, e.FinishedAt)
		}
	}
	// The third is claimed, then its agent goes offline.
	got, _ = st.ClaimTasks(ctx, "od-src", at(27), 2, 5*time.Second)
	if len(got) != 1 || got[0].TaskID != ts[2].TaskID {
		t.Fatalf("third claim: %v", got)
	}
	failed, err := st.FailAgentTasks(ctx, "od-src", "", at(40))
	if err != nil || len(failed) != 1 || failed[0].State != store.TaskFailed || failed[0].Reason != store.ReasonAgentOffline {
		t.Errorf("fail agent tasks: %d tasks (%v)", len(failed), err)
	}
	if again, _ := st.FailAgentTasks(ctx, "od-src", "", at(41)); len(again) != 0 {
		t.Errorf("failed twice: %v", again)
	}
}

func ofSource(ts []store.Task, src string) []store.Task {
	var out []store.Task
	for _, t := range ts {
		if t.SrcPodUID == src {
			out = append(out, t)
		}
	}
	return out
}
