package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testPaging walks pages of tasks and runs (AfterID, Limit, totals,
// filters) and checks that a bad page or filter is ErrInvalid.
func testPaging(t *testing.T, st store.Store) {
	ctx := context.Background()
	tasks := make([]store.Task, 5)
	for i := range tasks {
		tasks[i] = mkTask("pg-src", "pg-dst", "ping")
	}
	tasks[3].Type = "iperf3"
	made := create(t, st, tasks...)
	var runIDs []string
	for i := range 3 {
		r, _, err := st.CreateRun(ctx, store.Run{Suite: "pg-suite"}, nil, at(float64(i)))
		if err != nil {
			t.Fatalf("create run %d: %v", i, err)
		}
		runIDs = append(runIDs, r.ID)
	}

	// Every task of pg-src, two a page.
	var walked []string
	var after int64
	for range 4 {
		page, total, err := st.ListTasks(ctx, store.TaskFilter{AgentUID: "pg-src"}, store.Page{Limit: 2, AfterID: after})
		if err != nil || total != 5 {
			t.Fatalf("task page after %d: total %d, %v; want 5", after, total, err)
		}
		if len(page) > 2 {
			t.Fatalf("task page after %d: %d tasks, limit 2", after, len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			walked = append(walked, p.TaskID)
		}
		after = page[len(page)-1].ID
	}
	var want []string
	for _, m := range made {
		want = append(want, m.TaskID)
	}
	if fmt.Sprint(walked) != fmt.Sprint(want) {
		t.Errorf("tasks page by page %v, want %v in creation order", walked, want)
	}
	// The destination's listing finds the same tasks; a type filter one.
	if _, total, err := st.ListTasks(ctx, store.TaskFilter{AgentUID: "pg-dst"}, store.Page{Limit: 1}); err != nil || total != 5 {
		t.Errorf("tasks of the destination: total %d, %v; want 5", total, err)
	}
	if page, total, err := st.ListTasks(ctx, store.TaskFilter{AgentUID: "pg-src", Type: "iperf3"}, store.Page{}); err != nil || total != 1 || len(page) != 1 || page[0].TaskID != made[3].TaskID {
		t.Errorf("iperf3 tasks: %v total %d, %v", page, total, err)
	}

	// Runs of pg-suite, two a page, by Seq.
	first, total, err := st.ListRuns(ctx, store.RunFilter{Suite: "pg-suite"}, store.Page{Limit: 2})
	if err != nil || total != 3 || len(first) != 2 || first[0].ID != runIDs[0] || first[1].ID != runIDs[1] {
		t.Fatalf("run page 1: %v total %d, %v", first, total, err)
	}
	rest, _, err := st.ListRuns(ctx, store.RunFilter{Suite: "pg-suite", State: store.RunRunning}, store.Page{Limit: 2, AfterID: first[1].Seq})
	if err != nil || len(rest) != 1 || rest[0].ID != runIDs[2] {
		t.Errorf("run page 2: %v, %v", rest, err)
	}
	if n, err := st.CountRuns(ctx, store.RunFilter{Suite: "pg-suite", State: store.RunRunning}); err != nil || n != 3 {
		t.Errorf("running runs of pg-suite counted: %d, %v; want 3", n, err)
	}

	bad := []struct {
		name string
		list func() error
	}{
		{"negative limit", func() error { _, _, err := st.ListTasks(ctx, store.TaskFilter{}, store.Page{Limit: -1}); return err }},
		{"negative after_id", func() error { _, _, err := st.ListRuns(ctx, store.RunFilter{}, store.Page{AfterID: -1}); return err }},
		{"unknown task state", func() error {
			_, _, err := st.ListTasks(ctx, store.TaskFilter{State: "bogus"}, store.Page{})
			return err
		}},
		{"unknown run state", func() error { _, _, err := st.ListRuns(ctx, store.RunFilter{State: "bogus"}, store.Page{}); return err }},
		{"unknown run state counted", func() error { _, err := st.CountRuns(ctx, store.RunFilter{State: "bogus"}); return err }},
	}
	for _, b := range bad {
		if err := b.list(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", b.name, err)
		}
	}
}
