package suite

import (
	"errors"
	"fmt"
	"slices"
)

// Placements, as `--set placement=same-node,cross-node` names them: the
// pods of a pair on one node, or on two.
const (
	PlacementSameNode  = "same-node"
	PlacementCrossNode = "cross-node"
)

// PlacementConnection is each placement's connection.
var PlacementConnection = map[string]string{PlacementSameNode: PodPodSameNode, PlacementCrossNode: PodPodCrossNode}

// PlacedPair is a pair of pods and its placement.
type PlacedPair struct {
	Placement string
	Pair      Pair
}

// CheckPlacements checks a placement list: known names, none twice.
func CheckPlacements(ps []string) error {
	var errs []error
	for i, p := range ps {
		if _, ok := PlacementConnection[p]; !ok {
			errs = append(errs, fmt.Errorf("placement %q: want %s or %s", p, PlacementSameNode, PlacementCrossNode))
		}
		if slices.Contains(ps[:i], p) {
			errs = append(errs, fmt.Errorf("placement %q given twice", p))
		}
	}
	return errors.Join(errs...)
}

// PlacedPairs picks a pair of pods for each placement asked for (same
// node, then cross node), or, when none is asked for, for every
// placement the agents allow. A placement asked for that the agents
// cannot give is an error saying what it needs.
func PlacedPairs(agents []Endpoint, asked []string) ([]PlacedPair, error) {
	if err := CheckPlacements(asked); err != nil {
		return nil, err
	}
	pairs, err := PickPairs(agents)
	if err != nil {
		return nil, err
	}
	var out []PlacedPair
	for _, pl := range []string{PlacementSameNode, PlacementCrossNode} {
		p, ok := pairs[PlacementConnection[pl]]
		named := slices.Contains(asked, pl)
		switch {
		case len(asked) > 0 && !named:
			continue
		case !ok && named && pl == PlacementSameNode:
			return nil, errors.New("the same-node placement needs two pods on one node (lab: --pods-per-node 2)")
		case !ok && named:
			return nil, errors.New("the cross-node placement needs pods on two nodes")
		case !ok:
			continue
		}
		out = append(out, PlacedPair{Placement: pl, Pair: p})
	}
	if len(out) == 0 {
		return nil, errors.New("needs two pods, on one node or on two")
	}
	return out, nil
}
