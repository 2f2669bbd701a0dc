package matrix

import (
	"fmt"

	"github.com/cnperf/cnperf/internal/pairplan"
)

// ZoneRounds are cycle c's pairs of the zones plan in rounds of disjoint
// pairs: the zones' full meshes side by side (the round method's round r
// of every zone together, zones sharing no node), then every ordered
// pair of the representatives of different zones.
func ZoneRounds(zones [][]int, cycle int) [][][2]int {
	var out [][][2]int
	for _, z := range zones {
		for r, round := range Rounds(len(z)) {
			if r == len(out) {
				out = append(out, nil)
			}
			for _, p := range round {
				out[r] = append(out[r], [2]int{z[p[0]], z[p[1]]})
			}
		}
	}
	if len(zones) < 2 {
		return out
	}
	reps := pairplan.Representatives(zones, cycle)
	for _, round := range Rounds(len(reps)) {
		var r [][2]int
		for _, p := range round {
			r = append(r, [2]int{reps[p[0]], reps[p[1]]})
		}
		out = append(out, r)
	}
	return out
}

// ZoneStatement says what the zones plan does: zones, pairs and rounds a
// cycle, and the window in which every node has represented its zone.
func ZoneStatement(label string, zones [][]int, cycles, firstCycle int) string {
	n, inside := 0, 0
	for _, z := range zones {
		n += len(z)
		inside += len(z) * (len(z) - 1)
	}
	across := len(zones) * (len(zones) - 1)
	w := pairplan.ZoneWindow(zones)
	return fmt.Sprintf("plan zones: %d nodes in %d zones by %s; each cycle every ordered pair inside a zone (%d) and one representative a zone to each other zone's (%d) in %d rounds; every node represents its zone within %d cycles; this run: cycles %d to %d, %s",
		n, len(zones), label, inside, across, len(ZoneRounds(zones, firstCycle)), w, firstCycle, firstCycle+cycles-1, share(cycles, w))
}
