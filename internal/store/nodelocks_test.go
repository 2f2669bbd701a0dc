package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestClaimsOnOtherNodesGoOn: on PostgreSQL a claim of exclusive tasks
// serialises only claims on its nodes. While one claim (a→b) is held up,
// a claim on two other nodes (c→d) goes through at once, and a claim
// toward a node of the first (e→b) waits for it and then finds the node
// busy.
func TestClaimsOnOtherNodesGoOn(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	var agents []store.Agent
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		agents = append(agents, store.Agent{PodUID: "nl-" + n, PodName: "p-" + n, NodeName: "node-" + n})
	}
	if _, err := st.RegisterAgents(ctx, agents, t0); err != nil {
		t.Fatal(err)
	}
	excl := func(src, dst string) store.Task {
		return store.Task{SrcPodUID: "nl-" + src, DstPodUID: "nl-" + dst, Type: "iperf3", Exclusive: true, Timeout: 10 * time.Second}
	}
	ts, err := st.CreateTasks(ctx, "", []store.Task{excl("a", "b"), excl("c", "d"), excl("e", "b")}, t0)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the claim of a→b up: another transaction holds its task's row.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM tasks WHERE task_id = $1 FOR UPDATE", ts[0].TaskID); err != nil {
		t.Fatal(err)
	}
	type claimed struct {
		ts  []store.Task
		err error
	}
	claim := func(src string) chan claimed {
		ch := make(chan claimed, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got, err := st.ClaimTasks(cctx, "nl-"+src, t0.Add(time.Second), 10, time.Second)
			ch <- claimed{got, err}
		}()
		return ch
	}
	first := claim("a")
	time.Sleep(500 * time.Millisecond) // the first claim waits on the row
	select {
	case c := <-first:
		t.Fatalf("the claim of a→b did not wait for its task's row: %+v", c)
	default:
	}
	shared := claim("e")
	time.Sleep(200 * time.Millisecond)
	select {
	case c := <-claim("c"):
		if c.err != nil || len(c.ts) != 1 || c.ts[0].TaskID != ts[1].TaskID {
			t.Fatalf("claim of c→d beside a held-up claim on other nodes: %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim of c→d waited for a claim on other nodes")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if c := <-first; c.err != nil || len(c.ts) != 1 || c.ts[0].TaskID != ts[0].TaskID {
		t.Fatalf("claim of a→b once free: %+v", c)
	}
	if c := <-shared; c.err != nil || len(c.ts) != 0 {
		t.Fatalf("claim of e→b while a→b holds node b: %+v, want nothing", c)
	}
}
