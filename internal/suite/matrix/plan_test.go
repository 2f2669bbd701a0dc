package matrix

import (
	"fmt"
	"testing"
)

// TestSampleCoversEveryPairWithinWindow: for many n and k, any Window(n, k)
// consecutive cycles (from several starting cycles) measure every ordered
// pair, each cycle measures n·k distinct pairs in at most 3k rounds, and
// no node is in two pairs of a round.
func TestSampleCoversEveryPairWithinWindow(t *testing.T) {
	ns := []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 31, 64, 100, 101}
	ks := []int{1, 2, 3, 4, 5, 7, 10, 16, 200}
	for _, n := range ns {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("node-%d", i)
		}
		ring := Ring(names)
		for _, k := range ks {
			kk := min(k, n-1)
			w := Window(n, k)
			if want := (n - 1 + kk - 1) / kk; w != want {
				t.Fatalf("n=%d k=%d: window %d, want ceil((n-1)/k) = %d", n, k, w, want)
			}
			for _, c0 := range []int{0, 1, 5, n, 3*n + 2} {
				seen := map[[2]int]bool{}
				for c := c0; c < c0+w; c++ {
					rounds := SampleRounds(ring, k, c)
					if len(rounds) > 3*kk {
						t.Errorf("n=%d k=%d cycle %d: %d rounds, want at most %d", n, k, c, len(rounds), 3*kk)
					}
					cycle := map[[2]int]bool{}
					for ri, r := range rounds {
						busy := map[int]bool{}
						for _, p := range r {
							if p[0] == p[1] || busy[p[0]] || busy[p[1]] || p[0] < 0 || p[0] >= n || p[1] < 0 || p[1] >= n {
								t.Fatalf("n=%d k=%d cycle %d round %d: bad or shared pair %v in %v", n, k, c, ri, p, r)
							}
							busy[p[0]], busy[p[1]] = true, true
							cycle[p] = true
							seen[p] = true
						}
					}
					if len(cycle) != n*kk {
						t.Errorf("n=%d k=%d cycle %d: %d distinct pairs, want %d", n, k, c, len(cycle), n*kk)
					}
				}
				if len(seen) != n*(n-1) {
					t.Errorf("n=%d k=%d from cycle %d: %d of %d ordered pairs in %d cycles", n, k, c0, len(seen), n*(n-1), w)
				}
			}
		}
	}
}

// TestSampleRotates: consecutive cycles measure different peer sets.
func TestSampleRotates(t *testing.T) {
	ring := Ring([]string{"a", "b", "c", "d", "e", "f", "g", "h"})
	first := fmt.Sprint(SampleRounds(ring, 2, 0))
	if second := fmt.Sprint(SampleRounds(ring, 2, 1)); first == second {
		t.Fatalf("cycles 0 and 1 measure the same pairs: %s", first)
	}
}

func TestPack(t *testing.T) {
	pairs := [][2]int{{0, 1}, {1, 0}, {2, 3}, {1, 2}, {3, 0}, {4, 5}}
	rounds := Pack(pairs)
	n := 0
	for _, r := range rounds {
		busy := map[int]bool{}
		for _, p := range r {
			if busy[p[0]] || busy[p[1]] {
				t.Fatalf("node shared in round %v", r)
			}
			busy[p[0]], busy[p[1]] = true, true
			n++
		}
	}
	if n != len(pairs) {
		t.Fatalf("%d pairs packed, want %d", n, len(pairs))
	}
}
