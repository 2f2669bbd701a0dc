package matrix

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
)

// SampleRounds are cycle c's pairs of the sample plan over n nodes (ring
// positions mapped through ring, as from Ring) in rounds of disjoint
// pairs. One offset's pairs (i → i+o) form cycles of a permutation; each
// cycle's pairs alternate between two rounds, and an odd cycle's last
// pair takes a third, so a cycle of the plan has at most 3k rounds (2k
// when every such cycle is even).
func SampleRounds(ring []int, k, cycle int) [][][2]int {
	n := len(ring)
	var out [][][2]int
	for _, o := range pairplan.Offsets(n, k, cycle) {
		rounds := make([][][2]int, 3)
		seen := make([]bool, n)
		for start := 0; start < n; start++ {
			if seen[start] {
				continue
			}
			var walk []int
			for i := start; !seen[i]; i = (i + o) % n {
				seen[i] = true
				walk = append(walk, i)
			}
			for j, i := range walk {
				r := j % 2
				if len(walk)%2 == 1 && j == len(walk)-1 {
					r = 2
				}
				rounds[r] = append(rounds[r], [2]int{ring[i], ring[(i+o)%n]})
			}
		}
		for _, r := range rounds {
			if len(r) > 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

// SampleRoundCount is the number of rounds SampleRounds gives cycle c
// of n nodes with k peers, without making them: per offset o, 2 when the
// permutation i → i+o (mod n) has cycles of even length n/gcd(n, o),
// else 3.
func SampleRoundCount(n, k, cycle int) int {
	r := 0
	for _, o := range pairplan.Offsets(n, k, cycle) {
		a, b := n, o
		for b != 0 {
			a, b = b, a%b
		}
		if (n/a)%2 == 0 {
			r += 2
		} else {
			r += 3
		}
	}
	return r
}

// MaxJitter bounds the jitter setting: a pair's start delay is a
// task's StartDelay (probe.MaxStartDelay).
const MaxJitter = 10 * time.Second

// Jitter is the delay, below bound, before the pair src → dst starts its
// first measurement in cycle c: a hash of the cycle and the names, so
// the pairs of a round do not all open their connections at once, each
// pair's delay changes from cycle to cycle, and a re-planned cycle gets
// the same delays. Whole milliseconds; 0 when bound is.
func Jitter(bound time.Duration, cycle int, src, dst string) time.Duration {
	ms := bound.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s\x00%s", cycle, src, dst)
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// Pack puts pairs into rounds in which no node is in two pairs, each pair
// into the first round where both its nodes are free.
func Pack(pairs [][2]int) [][][2]int {
	var rounds [][][2]int
	var busy []map[int]bool
	for _, p := range pairs {
		placed := false
		for i := range rounds {
			if !busy[i][p[0]] && !busy[i][p[1]] {
				rounds[i] = append(rounds[i], p)
				busy[i][p[0]], busy[i][p[1]] = true, true
				placed = true
				break
			}
		}
		if !placed {
			rounds = append(rounds, [][2]int{p})
			busy = append(busy, map[int]bool{p[0]: true, p[1]: true})
		}
	}
	return rounds
}

// Statement says what a plan does before it runs: pairs a cycle, rounds
// (cycle length) and the window in which every ordered pair is measured.
func Statement(plan string, n, k, cycles, firstCycle int) string {
	total := n * (n - 1)
	if plan == pairplan.PlanAll {
		return fmt.Sprintf("plan all: %d nodes, all %d ordered pairs each cycle in %d rounds; every pair covered each cycle; this run: cycles %d to %d, the whole window", n, total, len(Rounds(n)), firstCycle, firstCycle+cycles-1)
	}
	k = min(max(k, 1), n-1)
	w := pairplan.Window(n, k)
	lo, hi, all := 0, 0, 0
	for c := firstCycle; c < firstCycle+w; c++ {
		r := SampleRoundCount(n, k, c)
		if c == firstCycle || r < lo {
			lo = r
		}
		hi, all = max(hi, r), all+r
	}
	rounds := strconv.Itoa(lo)
	if hi > lo {
		rounds += " to " + strconv.Itoa(hi)
	}
	return fmt.Sprintf("plan sample: %d nodes, %d peers a node, %d of %d ordered pairs each cycle in %s rounds (plus re-measures of suspects); every pair covered within %d cycles (%d rounds); this run: cycles %d to %d, %s",
		n, k, n*k, total, rounds, w, all, firstCycle, firstCycle+cycles-1, share(cycles, w))
}

// share says how much of a window of w cycles a run of c cycles covers.
func share(c, w int) string {
	if c >= w {
		return "the whole window"
	}
	return fmt.Sprintf("%d of the window's %d cycles", c, w)
}
