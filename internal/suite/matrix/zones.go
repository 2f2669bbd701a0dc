package matrix

import (
	"fmt"
	"slices"
)

// PlanZones measures every ordered pair inside a zone (nodes sharing a
// node label's value) each cycle, and across zones one representative a
// zone, rotating, so that every node speaks for its zone within the
// largest zone's size in cycles (Pingmesh's full mesh in a rack,
// representatives between racks).
const PlanZones = "zones"

// DefaultZoneLabel is the node label plan=zones groups nodes by.
const DefaultZoneLabel = "topology.kubernetes.io/zone"

// Zones groups node indexes by zone (zone[i] is node i's), zones in name
// order, each zone's nodes in ring order (Ring), so a zone's
// representatives rotate in an order not tied to the names.
func Zones(names, zone []string) [][]int {
	ring := Ring(names)
	by := map[string][]int{}
	for _, i := range ring {
		by[zone[i]] = append(by[zone[i]], i)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]int, len(keys))
	for i, k := range keys {
		out[i] = by[k]
	}
	return out
}

// ZoneWindow is the number of cycles within which every node of zones
// represents its zone: the largest zone's size (1 with a single zone,
// whose full mesh is measured every cycle).
func ZoneWindow(zones [][]int) int {
	w := 1
	if len(zones) < 2 {
		return w
	}
	for _, z := range zones {
		w = max(w, len(z))
	}
	return w
}

// Representatives are each zone's node that measures across zones in
// cycle c: the zone's (c mod size)-th node.
func Representatives(zones [][]int, cycle int) []int {
	out := make([]int, len(zones))
	for i, z := range zones {
		k := cycle % len(z)
		if k < 0 {
			k += len(z)
		}
		out[i] = z[k]
	}
	return out
}

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
	reps := Representatives(zones, cycle)
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
	w := ZoneWindow(zones)
	return fmt.Sprintf("plan zones: %d nodes in %d zones by %s; each cycle every ordered pair inside a zone (%d) and one representative a zone to each other zone's (%d) in %d rounds; every node represents its zone within %d cycles; this run: cycles %d to %d, %s",
		n, len(zones), label, inside, across, len(ZoneRounds(zones, firstCycle)), w, firstCycle, firstCycle+cycles-1, share(cycles, w))
}
