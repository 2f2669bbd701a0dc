package rr

import (
	"testing"
	"time"
)

// TestWallClockFollowsTimeNow checks that wallClock reads what time.Now
// reads, across its resyncs.
func TestWallClockFollowsTimeNow(t *testing.T) {
	c := newWallClock()
	for i := 0; i < 3*resyncEvery; i++ {
		before := time.Now().UnixNano()
		got := c.now()
		after := time.Now().UnixNano()
		// A reading between two time.Now readings, give or take the
		// rounding of one monotonic-to-wall conversion.
		if got < before-1000 || got > after+1000 {
			t.Fatalf("reading %d: wallClock %d outside time.Now's [%d, %d]", i, got, before, after)
		}
	}
}

// TestWallClockFollowsAStep checks that a wall-clock step (simulated by a
// base whose wall time is off by an hour) is followed at the next resync.
func TestWallClockFollowsAStep(t *testing.T) {
	c := newWallClock()
	c.wall -= int64(time.Hour)
	for i := 0; i < resyncEvery; i++ {
		c.now()
	}
	if d := time.Now().UnixNano() - c.now(); d > int64(time.Millisecond) || d < -int64(time.Millisecond) {
		t.Fatalf("after %d readings wallClock is %v off time.Now", resyncEvery+1, time.Duration(d))
	}
}

// TestPeekPolicy checks when the TCP client looks for a queued response
// before blocking: always while looks find it, after a miss only every
// peekRetry transactions until one finds it again.
func TestPeekPolicy(t *testing.T) {
	tests := []struct {
		name  string
		found []bool // what each look finds, in order
		tries int    // transactions
		want  int    // looks taken
	}{
		{"always found", []bool{true}, 100, 100},
		{"never found", []bool{false}, 1 + 3*peekRetry, 1 + 3},
		{"found again after misses", []bool{false, true}, 1 + peekRetry + 10, 1 + 1 + 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p peekPolicy
			looks := 0
			for i := 0; i < tc.tries; i++ {
				if !p.try() {
					continue
				}
				f := tc.found[min(looks, len(tc.found)-1)]
				looks++
				p.result(f)
			}
			if looks != tc.want {
				t.Fatalf("%d looks in %d transactions, want %d", looks, tc.tries, tc.want)
			}
		})
	}
}
