package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// TestLane: a lane hands out at most its connections, the same ones again
// once given back; a connection whose use failed is closed and its place
// made again; after close it keeps none.
func TestLane(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "lane.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	l := newLane(db, 2)
	a, b := l.get(ctx), l.get(ctx)
	if a == nil || b == nil || a == b {
		t.Fatalf("two gets: %p %p, want two connections", a, b)
	}
	if c := l.get(ctx); c != nil {
		t.Fatal("a third get while both are out: want none (the pool's turn)")
	}
	l.put(a, false)
	if again := l.get(ctx); again != a {
		t.Errorf("after a put, get gave %p, want the same connection %p", again, a)
	}
	l.put(b, true) // failed: closed, its place free
	if err := b.PingContext(ctx); err == nil {
		t.Error("a connection whose use failed is still open")
	}
	c := l.get(ctx)
	if c == nil || c == b || c.PingContext(ctx) != nil {
		t.Fatalf("get after a failed one: %p, want a new open connection", c)
	}
	l.put(c, false)
	l.close()
	if err := c.PingContext(ctx); err == nil {
		t.Error("an idle lane connection is open after close")
	}
	l.put(a, false) // given back after close: closed
	if err := a.PingContext(ctx); err == nil {
		t.Error("a connection given back after close is open")
	}
	if d := l.get(ctx); d != nil {
		t.Error("a closed lane gave a connection")
	}
	var nilLane *lane
	if nilLane.get(ctx) != nil {
		t.Error("a nil lane gave a connection")
	}
	nilLane.close()
}
