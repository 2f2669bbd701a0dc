package matrix

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestZonesCoverWithinWindow: for zone layouts of many shapes, every
// cycle measures every ordered pair inside each zone and some pair from
// each zone to each other, with no node in two pairs of a round; within
// the stated window (from any cycle) every node has measured to and from
// every other zone.
func TestZonesCoverWithinWindow(t *testing.T) {
	for _, sizes := range [][]int{{4}, {1, 1}, {3, 3, 3}, {1, 5}, {2, 7, 1, 3}, {10, 10, 10}, {6, 5}, {2, 2, 2, 2, 2, 2}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			var names, zone []string
			for zi, s := range sizes {
				for j := 0; j < s; j++ {
					names = append(names, fmt.Sprintf("z%d-node-%d", zi, j))
					zone = append(zone, fmt.Sprintf("zone-%c", 'a'+zi))
				}
			}
			zones := pairplan.Zones(names, zone)
			if len(zones) != len(sizes) {
				t.Fatalf("%d zones, want %d", len(zones), len(sizes))
			}
			w := pairplan.ZoneWindow(zones)
			for _, c0 := range []int{0, 1, 7} {
				out := map[[2]int]bool{} // node → zone it measured to (and from, as [zone, node] negated)
				for c := c0; c < c0+w; c++ {
					seen := map[[2]int]bool{}
					for ri, round := range ZoneRounds(zones, c) {
						busy := map[int]bool{}
						for _, p := range round {
							if p[0] == p[1] || busy[p[0]] || busy[p[1]] {
								t.Fatalf("cycle %d round %d: pair %v shares a node in %v", c, ri, p, round)
							}
							busy[p[0]], busy[p[1]] = true, true
							seen[p] = true
						}
					}
					inside := 0
					for _, z := range zones {
						for _, a := range z {
							for _, b := range z {
								if a != b && !seen[[2]int{a, b}] {
									t.Fatalf("cycle %d: pair %s → %s inside %s not measured", c, names[a], names[b], zone[a])
								}
								if a != b {
									inside++
								}
							}
						}
					}
					across := 0
					for p := range seen {
						if zone[p[0]] != zone[p[1]] {
							across++
							out[[2]int{p[0], zoneIdx(zones, p[1])}] = true
							out[[2]int{-1 - p[1], zoneIdx(zones, p[0])}] = true
						}
					}
					if want := len(zones) * (len(zones) - 1); across != want || len(seen) != inside+across {
						t.Fatalf("cycle %d: %d pairs across zones, %d in all; want %d across, %d in all", c, across, len(seen), want, inside+want)
					}
				}
				for zi, z := range zones {
					for _, a := range z {
						for zj := range zones {
							if zi != zj && (!out[[2]int{a, zj}] || !out[[2]int{-1 - a, zj}]) {
								t.Errorf("from cycle %d, within %d cycles: %s never measured to and from zone %d", c0, w, names[a], zj)
							}
						}
					}
				}
			}
		})
	}
}

func zoneIdx(zones [][]int, node int) int {
	for i, z := range zones {
		for _, n := range z {
			if n == node {
				return i
			}
		}
	}
	return -1
}

// TestZonesPlan: the suite plans zones from the endpoints' node labels
// (by zone-label): no node in two pairs of a phase, the run covering the
// stated window by default, every pair inside a zone measured each cycle
// and the zones joined; a node without the label is refused by name.
func TestZonesPlan(t *testing.T) {
	eps := agentsN(9)
	for i := range eps {
		eps[i].NodeLabels = &suite.NodeLabels{"rack": fmt.Sprintf("r%d", i%3)}
	}
	o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"plan": "zones", "zone-label": "rack"}}
	s := Suite{}
	st := s.Announce(eps, o)
	for _, want := range []string{"plan zones: 9 nodes in 3 zones by rack", "inside a zone (18)", "each other zone's (6)", "within 3 cycles", "cycles 0 to 2, the whole window", "starts 0-1s late"} {
		if !strings.Contains(st, want) {
			t.Errorf("statement %q lacks %q", st, want)
		}
	}
	phases, err := s.Plan(eps, o, suite.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	var done []suite.Outcome
	for guard := 0; len(phases) > 0; guard++ {
		if guard > 20 {
			t.Fatal("Follow does not end")
		}
		for _, ph := range phases {
			busy := map[string]bool{}
			for _, st := range ph.Steps {
				if st.Measure != suite.MeasureTCP {
					continue
				}
				if busy[st.Src.Node] || busy[st.Dst.Node] {
					t.Fatalf("phase %q: a node of %s → %s in two pairs", ph.Name, st.Src.Node, st.Dst.Node)
				}
				busy[st.Src.Node], busy[st.Dst.Node] = true, true
				done = append(done, suite.Outcome{Step: st, Result: answer(st, nil, nil, map[string]int{})})
			}
		}
		if phases, err = s.Follow(eps, o, suite.Caps{}, done); err != nil {
			t.Fatal(err)
		}
	}
	perCycle := map[string]map[string]bool{}
	for _, d := range done {
		c := d.Step.Labels[LabelCycle]
		if perCycle[c] == nil {
			perCycle[c] = map[string]bool{}
		}
		perCycle[c][d.Step.Src.Node+">"+d.Step.Dst.Node] = true
	}
	if len(perCycle) != 3 {
		t.Errorf("%d cycles run, want the window's 3", len(perCycle))
	}
	for c, pairs := range perCycle {
		if len(pairs) != 18+6 {
			t.Errorf("cycle %s: %d pairs, want 24", c, len(pairs))
		}
		if !pairs["n1>n4"] || !pairs["n4>n7"] {
			t.Errorf("cycle %s: pairs inside zone r0 missing", c)
		}
	}
	eps[4].NodeLabels = nil
	if _, err := s.Plan(eps, o, suite.Caps{}); err == nil || !strings.Contains(err.Error(), "no label rack on node n5") {
		t.Errorf("node without the label: err %v, want it named", err)
	}
}
