package matrix

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestSampleCoversEveryPairWithinWindow: for many n and k, any pairplan.Window(n, k)
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
		ring := pairplan.Ring(names)
		for _, k := range ks {
			kk := min(k, n-1)
			w := pairplan.Window(n, k)
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
	ring := pairplan.Ring([]string{"a", "b", "c", "d", "e", "f", "g", "h"})
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

// TestJitter: delays stay below the bound, repeat for the same cycle and
// pair, change with the cycle, and are 0 with no bound.
func TestJitter(t *testing.T) {
	for _, bound := range []time.Duration{0, time.Millisecond, 250 * time.Millisecond, time.Second, MaxJitter} {
		differ := false
		for c := 0; c < 20; c++ {
			for _, p := range [][2]string{{"n1", "n2"}, {"n2", "n1"}, {"node-a", "node-b"}} {
				d := Jitter(bound, c, p[0], p[1])
				if d < 0 || (bound > 0 && d >= bound) || (bound == 0 && d != 0) {
					t.Fatalf("bound %v cycle %d %v: delay %v, want 0 <= d < bound", bound, c, p, d)
				}
				if d != Jitter(bound, c, p[0], p[1]) {
					t.Fatalf("bound %v cycle %d %v: not deterministic", bound, c, p)
				}
				differ = differ || d != Jitter(bound, c+1, p[0], p[1])
			}
		}
		if bound >= 250*time.Millisecond && !differ {
			t.Errorf("bound %v: the same delays every cycle", bound)
		}
	}
}

// TestPlannedJitter: the sample plan's pairs start their first
// measurement within the jitter bound, not all at the same delay, and
// their later measurements without one; plan=all and jitter=0 start at
// once; the statement names the bound; a bound over 10s is refused.
func TestPlannedJitter(t *testing.T) {
	eps := agentsN(8)
	for _, tc := range []struct {
		set    map[string]string
		bound  time.Duration
		stated string
	}{
		{map[string]string{"plan": "sample", "peers": "2"}, time.Second, "starts 0-1s late"},
		{map[string]string{"plan": "sample", "peers": "2", "jitter": "3s"}, 3 * time.Second, "starts 0-3s late"},
		{map[string]string{"plan": "sample", "peers": "2", "jitter": "0"}, 0, ""},
		{map[string]string{"plan": "all"}, 0, ""},
	} {
		o := suite.Options{Time: time.Second, Repeat: 1, Set: tc.set}
		phases, err := Suite{}.Plan(eps, o, suite.Caps{})
		if err != nil {
			t.Fatal(err)
		}
		delays := map[time.Duration]bool{}
		for _, ph := range phases {
			for _, st := range ph.Steps {
				d := st.Spec.StartDelay.D()
				if st.Measure != suite.MeasureTCP && d != 0 {
					t.Errorf("set %v: %s step delayed %v, want only the first measurement", tc.set, st.Measure, d)
				}
				if st.Measure == suite.MeasureTCP {
					if d < 0 || (tc.bound == 0 && d != 0) || (tc.bound > 0 && d >= tc.bound) {
						t.Errorf("set %v: delay %v outside [0, %v)", tc.set, d, tc.bound)
					}
					delays[d] = true
				}
			}
		}
		if tc.bound > 0 && len(delays) < 2 {
			t.Errorf("set %v: delays %v, want pairs apart", tc.set, delays)
		}
		st := Suite{}.Announce(eps, o)
		if tc.stated != "" && !strings.Contains(st, tc.stated) || tc.stated == "" && strings.Contains(st, "late") {
			t.Errorf("set %v: statement %q, want %q", tc.set, st, tc.stated)
		}
	}
	if err := (Suite{}).CheckOptions(suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"jitter": "11s"}}); err == nil {
		t.Error("jitter 11s accepted")
	}
}
