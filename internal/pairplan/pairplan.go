// Package pairplan chooses which ordered pairs of nodes a cycle
// measures, for the node-pair matrix and the ping mesh alike: all of
// them; a sample of k peers a node that rotates with the cycle so that
// every pair comes round within ceil((n-1)/k) cycles; or zones (nodes
// sharing a label's value), meshed fully inside and joined through
// rotating representatives (Pingmesh's full mesh in a rack,
// representatives between racks).
package pairplan

import (
	"hash/fnv"
	"slices"
)

// The plans.
const (
	// PlanAll measures every ordered pair each cycle.
	PlanAll = "all"
	// PlanSample measures k peers a node each cycle, rotating so that
	// every ordered pair is measured within ceil((n-1)/k) cycles.
	PlanSample = "sample"
	// PlanZones measures every ordered pair inside a zone (nodes sharing
	// a node label's value) each cycle, and across zones one
	// representative a zone, rotating, so that every node speaks for its
	// zone within the largest zone's size in cycles.
	PlanZones = "zones"
)

// DefaultZoneLabel is the node label the zones plan groups nodes by.
const DefaultZoneLabel = "topology.kubernetes.io/zone"

// Known says whether plan names a plan.
func Known(plan string) bool {
	return plan == PlanAll || plan == PlanSample || plan == PlanZones
}

// Ring orders n node names by a hash of each name alone (FNV-1a), so a
// node's place does not depend on how the names sort, and nodes next to
// each other by name are not always measured together.
func Ring(names []string) []int {
	idx := make([]int, len(names))
	keys := make([]uint64, len(names))
	for i, n := range names {
		idx[i] = i
		h := fnv.New64a()
		h.Write([]byte(n))
		keys[i] = h.Sum64()
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return 0
	})
	return idx
}

// Window is the number of consecutive cycles of the sample plan within
// which every ordered pair of n nodes is measured with k peers a node:
// ceil((n-1)/k).
func Window(n, k int) int {
	if n < 2 {
		return 0
	}
	k = min(max(k, 1), n-1)
	return (n - 2 + k) / k
}

// Offsets are the ring offsets cycle c measures with k peers a node: k
// consecutive values of 1..n-1, starting k·c further each cycle. Any
// Window(n, k) consecutive cycles take k·Window ≥ n-1 consecutive values
// modulo n-1, so every offset, and so every ordered pair (i, i+offset),
// comes round within the window, whatever cycle it starts at. Peers drawn
// by rendezvous hashing seeded with the cycle would be random sets: the
// last pair then comes after about (n/k)·ln(n) cycles, with no bound.
func Offsets(n, k, cycle int) []int {
	if n < 2 {
		return nil
	}
	k = min(max(k, 1), n-1)
	out := make([]int, k)
	base := (cycle % (n - 1)) * k % (n - 1)
	if base < 0 {
		base += n - 1
	}
	for j := range out {
		out[j] = 1 + (base+j)%(n-1)
	}
	return out
}

// SamplePairs are cycle c's ordered pairs of the sample plan over the
// nodes of ring (as from Ring): each node to the nodes Offsets places
// on.
func SamplePairs(ring []int, k, cycle int) [][2]int {
	n := len(ring)
	var out [][2]int
	for _, o := range Offsets(n, k, cycle) {
		for i := range ring {
			out = append(out, [2]int{ring[i], ring[(i+o)%n]})
		}
	}
	return out
}

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

// ZonePairs are cycle c's ordered pairs of the zones plan: every pair
// inside each zone, then every pair of the cycle's representatives.
func ZonePairs(zones [][]int, cycle int) [][2]int {
	var out [][2]int
	for _, z := range zones {
		for _, a := range z {
			for _, b := range z {
				if a != b {
					out = append(out, [2]int{a, b})
				}
			}
		}
	}
	if len(zones) < 2 {
		return out
	}
	reps := Representatives(zones, cycle)
	for _, a := range reps {
		for _, b := range reps {
			if a != b {
				out = append(out, [2]int{a, b})
			}
		}
	}
	return out
}
