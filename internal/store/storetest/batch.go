package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testGetAgents: GetAgents returns the agents that exist among the uids
// asked for, past one statement's batch, and nothing for none.
func testGetAgents(t *testing.T, st store.Store) {
	ctx := context.Background()
	var batch []store.Agent
	for i := range 1203 {
		batch = append(batch, store.Agent{PodUID: fmt.Sprintf("ga-%d", i), PodName: fmt.Sprintf("ga-pod-%d", i), NodeName: fmt.Sprintf("ga-n%d", i%7)})
	}
	if _, err := st.RegisterAgents(ctx, batch, at(1)); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 1203; i += 2 {
		want = append(want, fmt.Sprintf("ga-%d", i))
	}
	got, err := st.GetAgents(ctx, append(slices.Clone(want), "nobody", "ga-0"), at(1))
	if err != nil {
		t.Fatal(err)
	}
	gotUIDs := uids(got)
	slices.Sort(gotUIDs)
	gotUIDs = slices.Compact(gotUIDs)
	slices.Sort(want)
	if !slices.Equal(gotUIDs, want) {
		t.Fatalf("GetAgents: %d agents, want %d (%v...)", len(gotUIDs), len(want), gotUIDs[:min(5, len(gotUIDs))])
	}
	for _, a := range got {
		if a.ID == 0 || a.NodeName == "" || !a.RegisterTime.Equal(at(1)) {
			t.Fatalf("GetAgents: %+v", a)
		}
	}
	if none, err := st.GetAgents(ctx, nil, at(1)); err != nil || len(none) != 0 {
		t.Errorf("GetAgents(nil): %v %v", none, err)
	}
	// HeldBy: the holder of the agent's live presence lease, "" once the
	// lease has expired and for an agent no session holds.
	if l, err := st.HoldLease(ctx, "presence ga-r1", "ga-r1", at(1), time.Minute); err != nil || !l.Held {
		t.Fatalf("hold lease: %+v %v", l, err)
	}
	if _, err := st.SetPresence(ctx, "presence ga-r1", []store.Presence{{PodUID: "ga-2", Held: true}}, at(1)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		now  time.Time
		want string
	}{{at(2), "ga-r1"}, {at(1).Add(2 * time.Minute), ""}} {
		got, err := st.GetAgents(ctx, []string{"ga-2", "ga-4"}, c.now)
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]string{}
		for _, a := range got {
			held[a.PodUID] = a.HeldBy
		}
		if len(got) != 2 || held["ga-2"] != c.want || held["ga-4"] != "" {
			t.Errorf("GetAgents at %s: held by %v, want ga-2 by %q and ga-4 by none", c.now, held, c.want)
		}
	}
}

// testManyTasks: a run of more tasks than one statement inserts is stored
// whole with distinct keys in order; a task id given twice across runs is
// refused by the index of the task, and nothing of its run is stored.
func testManyTasks(t *testing.T, st store.Store) {
	ctx := context.Background()
	if _, err := st.RegisterAgents(ctx, []store.Agent{{PodUID: "mt-a", NodeName: "mt-n1"}, {PodUID: "mt-b", NodeName: "mt-n2"}}, at(1)); err != nil {
		t.Fatal(err)
	}
	var ts []store.Task
	for range 1201 {
		ts = append(ts, store.Task{SrcPodUID: "mt-a", DstPodUID: "mt-b", DstPodIP: "10.0.0.2", Type: "ping"})
	}
	ts[7].TaskID = "mt-given-7"
	run, out, err := st.CreateRun(ctx, store.Run{Suite: "many"}, ts, at(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(ts) {
		t.Fatalf("%d tasks stored, want %d", len(out), len(ts))
	}
	for i := range out {
		if out[i].ID == 0 || (i > 0 && out[i].ID <= out[i-1].ID) || out[i].RunID != run.ID || out[i].State != store.TaskPending {
			t.Fatalf("task %d: %+v (previous key %d)", i, out[i], out[max(i-1, 0)].ID)
		}
		got, err := st.GetTask(ctx, out[i].TaskID)
		if err != nil || got.ID != out[i].ID {
			t.Fatalf("task %d read back: %+v %v, want key %d", i, got, err, out[i].ID)
		}
	}
	if out[7].TaskID != "mt-given-7" {
		t.Errorf("task 7's id %q, want the one given", out[7].TaskID)
	}
	again := []store.Task{
		{SrcPodUID: "mt-a", DstPodUID: "mt-b", Type: "ping"},
		{TaskID: "mt-fresh", SrcPodUID: "mt-a", DstPodUID: "mt-b", Type: "ping"},
		{TaskID: "mt-given-7", SrcPodUID: "mt-a", DstPodUID: "mt-b", Type: "ping"},
	}
	_, _, err = st.CreateRun(ctx, store.Run{Suite: "many"}, again, at(3))
	if !errors.Is(err, store.ErrConflict) || !containsAll(err.Error(), "task 2", "mt-given-7") {
		t.Errorf("a run repeating a task id: %v, want ErrConflict naming task 2", err)
	}
	if _, err := st.GetTask(ctx, "mt-fresh"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a task of the refused run was stored: %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
