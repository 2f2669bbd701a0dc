package pairplan

import (
	"fmt"
	"testing"
)

// TestSamplePairsCoverWithinWindow: any Window(n, k) consecutive cycles
// of SamplePairs, from any cycle, hold every ordered pair; a cycle gives
// each node k peers, none itself.
func TestSamplePairsCoverWithinWindow(t *testing.T) {
	for _, tc := range []struct{ n, k, first int }{
		{2, 1, 0}, {5, 2, 3}, {8, 2, 0}, {10, 3, 11}, {31, 4, 100}, {12, 20, 0},
	} {
		names := make([]string, tc.n)
		for i := range names {
			names[i] = fmt.Sprintf("node-%d", i)
		}
		ring := Ring(names)
		seen := map[[2]int]bool{}
		w := Window(tc.n, tc.k)
		for c := tc.first; c < tc.first+w; c++ {
			out := map[int]int{}
			for _, p := range SamplePairs(ring, tc.k, c) {
				if p[0] == p[1] {
					t.Fatalf("n %d k %d cycle %d: pair %v to itself", tc.n, tc.k, c, p)
				}
				seen[p] = true
				out[p[0]]++
			}
			for i, got := range out {
				if want := min(tc.k, tc.n-1); got != want {
					t.Errorf("n %d k %d cycle %d: node %d has %d peers, want %d", tc.n, tc.k, c, i, got, want)
				}
			}
		}
		if len(seen) != tc.n*(tc.n-1) {
			t.Errorf("n %d k %d from %d: %d of %d pairs within %d cycles", tc.n, tc.k, tc.first, len(seen), tc.n*(tc.n-1), w)
		}
	}
}

// TestZonePairs: every pair inside a zone each cycle, and across zones
// only the cycle's representatives, each zone's node in turn.
func TestZonePairs(t *testing.T) {
	zones := Zones([]string{"a", "b", "c", "d", "e"}, []string{"z1", "z1", "z1", "z2", "z2"})
	reps := map[int]bool{}
	for c := 0; c < ZoneWindow(zones); c++ {
		r := Representatives(zones, c)
		inside, across := 0, 0
		for _, p := range ZonePairs(zones, c) {
			if (p[0] < 3) == (p[1] < 3) {
				inside++
				continue
			}
			across++
			if p[0] != r[0] && p[0] != r[1] || p[1] != r[0] && p[1] != r[1] {
				t.Errorf("cycle %d: pair %v across zones is not between representatives %v", c, p, r)
			}
		}
		if inside != 3*2+2*1 || across != 2 {
			t.Errorf("cycle %d: %d pairs inside, %d across; want 8 and 2", c, inside, across)
		}
		for _, i := range r {
			reps[i] = true
		}
	}
	if len(reps) != 5 {
		t.Errorf("%d of 5 nodes represented their zone within %d cycles", len(reps), ZoneWindow(zones))
	}
}
