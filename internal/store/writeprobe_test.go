package store

import (
	"context"
	"path/filepath"
	"testing"
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
	if err := s.CheckWrite(ctx); err == nil {
		t.Fatal("CheckWrite passed on a store that cannot write")
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckWrite(ctx); err != nil {
		t.Fatalf("write probe after writes came back: %v", err)
	}
}
