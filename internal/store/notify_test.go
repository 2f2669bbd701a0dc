package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestNoticesGoWithTheCreation: on PostgreSQL the notices a claim's
// Notify returns are sent by the creating transaction, seen by a listener
// once it commits, and never when it rolls back (a run id that exists).
// SQLite, which has no NOTIFY, refuses them and stores nothing.
func TestNoticesGoWithTheCreation(t *testing.T) {
	ctx, st, dsn := openPostgres(t)
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN notice_test"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	held := heldAgents(t, st, t0, "nt-a", "nt-b")
	claim := store.CreateClaim{Limit: 5, Grace: time.Second, Agents: held, Notify: func(ts []store.Task, by map[string]string) []store.Notice {
		return []store.Notice{{Channel: "notice_test", Payload: ts[0].TaskID + " " + by[ts[0].SrcPodUID]}}
	}}
	task := store.Task{SrcPodUID: "nt-a", DstPodUID: "nt-b", Type: "probe", Timeout: 10 * time.Second}
	_, ts, err := st.CreateRunAndClaim(ctx, store.Run{ID: "nt-run", Suite: "matrix"}, []store.Task{task}, t0, claim)
	if err != nil {
		t.Fatal(err)
	}
	n, err := listener.WaitForNotification(ctx)
	if err != nil || n.Payload != ts[0].TaskID+" nt-r1" {
		t.Fatalf("notice %+v %v; want %q", n, err, ts[0].TaskID+" nt-r1")
	}
	if _, _, err := st.CreateRunAndClaim(ctx, store.Run{ID: "nt-run", Suite: "matrix"}, []store.Task{task}, t0, claim); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second run nt-run: %v, want ErrConflict", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		t.Errorf("a rolled-back creation sent %q", n.Payload)
	}

	lite, err := store.Open(ctx, "sqlite:"+t.TempDir()+"/cnperf.db")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	claim.Agents = heldAgents(t, lite, t0, "nt-a", "nt-b")
	if _, _, err := lite.CreateRunAndClaim(ctx, store.Run{ID: "nt-run", Suite: "matrix"}, []store.Task{task}, t0, claim); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SQLite with notices: %v, want ErrInvalid", err)
	}
	if _, err := lite.GetRun(ctx, "nt-run"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SQLite kept the refused run: %v", err)
	}
}

// heldAgents registers the agents, each on a node of its own, holding
// sessions on replica nt-r1, and returns them as GetAgents reads them.
func heldAgents(t *testing.T, st store.Store, now time.Time, uids ...string) map[string]store.Agent {
	t.Helper()
	ctx := context.Background()
	var as []store.Agent
	var ps []store.Presence
	for _, u := range uids {
		as = append(as, store.Agent{PodUID: u, PodName: "p-" + u, NodeName: "node-" + u})
		ps = append(ps, store.Presence{PodUID: u, Held: true})
	}
	if _, err := st.RegisterAgents(ctx, as, now); err != nil {
		t.Fatal(err)
	}
	if l, err := st.HoldLease(ctx, "presence nt-r1", "nt-r1", now, time.Minute); err != nil || !l.Held {
		t.Fatalf("hold the presence lease: %+v %v", l, err)
	}
	if _, err := st.SetPresence(ctx, "presence nt-r1", ps, now); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetAgents(ctx, uids, now)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.Agent{}
	for _, a := range got {
		out[a.PodUID] = a
	}
	return out
}

// TestCreationOutlivesDroppedConnections: after PostgreSQL drops every
// connection of the store (a restart, an administrator's
// pg_terminate_backend), the next run's endpoint read and creation still
// succeed: the creation lane's connections that cannot work are closed
// and the pool's are used.
func TestCreationOutlivesDroppedConnections(t *testing.T) {
	ctx, st, dsn := openPostgres(t)
	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	held := heldAgents(t, st, t0, "dc-a", "dc-b")
	claim := store.CreateClaim{Limit: 5, Grace: time.Second, Agents: held}
	task := store.Task{SrcPodUID: "dc-a", DstPodUID: "dc-b", Type: "probe", Timeout: 10 * time.Second}
	creation := func(n int) {
		t.Helper()
		if _, _, err := st.CreateRunAndClaim(ctx, store.Run{Suite: "matrix"}, []store.Task{task}, t0, claim); err != nil {
			t.Fatalf("creation %d: %v", n, err)
		}
	}
	read := func(n int) {
		t.Helper()
		if _, err := st.GetAgents(ctx, []string{"dc-a", "dc-b"}, t0); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	drop := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"); err != nil {
			t.Fatal(err)
		}
	}
	// Each first use after the drop meets the lane's dropped connection
	// (one is made and then reused): the creation's, then the read's.
	creation(1)
	drop()
	creation(2)
	read(2)
	drop()
	read(3)
	creation(3)
}

// openPostgres opens a store on a test database of its own, closed with
// the test, and a context that ends within 30 s.
func openPostgres(t *testing.T) (context.Context, store.Store, string) {
	t.Helper()
	dsn := storetest.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return ctx, st, dsn
}
