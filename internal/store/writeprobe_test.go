package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckWriteNeedsAWrite shows that CheckWrite fails where Ping still
// passes: the SQLite writer is switched to query-only (the database then
// refuses every write as a full disk or a read-only mount would).
func TestCheckWriteNeedsAWrite(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*sqlStore)
	for i := range 3 { // the row is created, then rewritten
		if err := s.CheckWrite(ctx); err != nil {
			t.Fatalf("write probe %d on a healthy store: %v", i, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a store that can read: %v", err)
	}
	if err := s.CheckWrite(ctx); err == nil || !CannotWrite(err) {
		t.Fatalf("CheckWrite on a store that cannot write: %v, want an error CannotWrite knows", err)
	}
	// Any write says so, in the driver's words, and CannotWrite knows them.
	_, err = st.UpsertHeartbeat(ctx, Agent{PodUID: "w"}, time.Now())
	if err == nil || !CannotWrite(err) || errors.Is(err, ErrCannotWrite) {
		t.Fatalf("heartbeat on a store that cannot write: %v, want the driver's error, which CannotWrite knows", err)
	}
	for _, other := range []error{ErrConflict, ErrNotFound, ErrInvalid, context.Canceled, errors.New("x")} {
		if CannotWrite(fmt.Errorf("wrapped: %w", other)) {
			t.Errorf("CannotWrite(%v) = true", other)
		}
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckWrite(ctx); err != nil {
		t.Fatalf("write probe after writes came back: %v", err)
	}
}

// TestSQLiteKeepsTempFilesInMemory: every SQLite connection keeps its
// temporary files in memory (temp_store 2), since the server's read-only
// root file system leaves SQLite no temporary directory to write them to.
func TestSQLiteKeepsTempFilesInMemory(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*sqlStore)
	for name, db := range map[string]interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}{"writer": s.w, "reader": s.r} {
		var mode int
		if err := db.QueryRowContext(ctx, "PRAGMA temp_store").Scan(&mode); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if mode != 2 {
			t.Errorf("%s: temp_store %d, want 2 (MEMORY)", name, mode)
		}
	}
}
