package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestMarkSilentOfflineSkipsLockedRows: on PostgreSQL the reaper's
// offline marks skip an agent row another transaction holds (a replica's
// flusher writing its time) instead of waiting for it, and mark it at a
// later pass once it is free and still silent.
func TestMarkSilentOfflineSkipsLockedRows(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	if _, err := st.RegisterAgents(ctx, []store.Agent{{PodUID: "held", PodName: "p-held"}, {PodUID: "free", PodName: "p-free"}}, t0); err != nil {
		t.Fatal(err)
	}
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
	if _, err := tx.ExecContext(ctx, "SELECT id FROM agents WHERE pod_uid = 'held' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	off, err := st.MarkSilentOffline(mctx, t0.Add(time.Minute), t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("mark offline beside a locked row: %v (it waited for the lock)", err)
	}
	if len(off) != 1 || off[0].PodUID != "free" {
		t.Fatalf("marked %+v beside the locked row, want only 'free'", off)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	off, err = st.MarkSilentOffline(ctx, t0.Add(time.Minute), t0.Add(time.Minute))
	if err != nil || len(off) != 1 || off[0].PodUID != "held" {
		t.Fatalf("next pass, the row free: %+v %v, want 'held' marked", off, err)
	}
}
