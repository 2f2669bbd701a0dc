package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testLeases: a lease is taken when free, renewed by its holder, refused
// to another replica until it expires, taken over after, released; of
// replicas racing for a free lease exactly one wins.
func testLeases(t *testing.T, st store.Store) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	steps := []struct {
		name       string
		holder     string
		now        time.Time
		wantHeld   bool
		wantHolder string
	}{
		{"free lease is taken", "r1", at(0), true, "r1"},
		{"holder renews", "r1", at(5), true, "r1"},
		{"another replica is refused before expiry", "r2", at(14), false, "r1"},
		{"taken over at expiry", "r2", at(15), true, "r2"},
		{"old holder is refused now", "r1", at(16), false, "r2"},
	}
	for _, s := range steps {
		l, err := st.HoldLease(ctx, "reaper-test", s.holder, s.now, ttl)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if l.Held != s.wantHeld || l.Holder != s.wantHolder {
			t.Errorf("%s: held %v by %q, want held %v by %q", s.name, l.Held, l.Holder, s.wantHeld, s.wantHolder)
		}
	}
	if err := st.ReleaseLease(ctx, "reaper-test", "r1"); err != nil { // not r1's: nothing
		t.Fatal(err)
	}
	if l, _ := st.HoldLease(ctx, "reaper-test", "r3", at(17), ttl); l.Held {
		t.Errorf("a release by a non-holder freed the lease: r3 got it")
	}
	if err := st.ReleaseLease(ctx, "reaper-test", "r2"); err != nil {
		t.Fatal(err)
	}
	if l, err := st.HoldLease(ctx, "reaper-test", "r3", at(17), ttl); err != nil || !l.Held {
		t.Errorf("after release: held %v, err %v; want r3 to hold it", l.Held, err)
	}
	if _, err := st.HoldLease(ctx, "", "r1", at(0), ttl); err == nil {
		t.Error("empty name accepted")
	}

	// Replicas racing for a fresh lease: one wins.
	const racers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range racers {
		wg.Go(func() {
			l, err := st.HoldLease(ctx, "race-test", string(rune('a'+i)), at(0), ttl)
			if err != nil {
				t.Errorf("racer %d: %v", i, err)
				return
			}
			if l.Held {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d of %d racers hold the lease, want 1", won, racers)
	}
}
