package contention

import (
	"math"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestPlan: per repetition a UDP and a TCP case per placement: cross
// node from node1's two pods to a pod on node2 through a FIFO on node1's
// uplink; same node from node1's second pod, twice, into its first.
func TestPlan(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat = 2
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 8 {
		t.Fatalf("%d phases, want 2 repetitions x 2 placements x (udp, tcp)", len(phases))
	}
	same, cross := phases[0], phases[2]
	if !same.Concurrent || len(same.Steps) != 2 || len(same.Changes) != 0 {
		t.Fatalf("same-node phase %+v", same)
	}
	if a, b := same.Steps[0], same.Steps[1]; a.Src.Name != "n1-p2" || b.Src.Name != "n1-p2" || a.Dst.Name != "n1-p1" || a.Labels[LabelBottleneck] != "receiver" {
		t.Errorf("same node: flows %s→%s and %s→%s (%s)", a.Src.Name, a.Dst.Name, b.Src.Name, b.Dst.Name, a.Labels[LabelBottleneck])
	}
	if !cross.Concurrent || len(cross.Steps) != 2 || len(cross.Changes) != 1 || cross.Changes[0].What != suite.CapNodeQdisc || cross.Changes[0].Member != "node1" {
		t.Fatalf("cross-node phase %+v", cross)
	}
	a, b := cross.Steps[0], cross.Steps[1]
	if a.Src.Name == b.Src.Name || a.Dst.Name != b.Dst.Name || a.Dst.Node == a.Src.Node || *a.Spec.RateBps != 10e9 || a.Labels[LabelBottleneck] != "1 Gbit/s FIFO" {
		t.Errorf("flows %s→%s and %s→%s at %v (%s)", a.Src.Name, a.Dst.Name, b.Src.Name, b.Dst.Name, *a.Spec.RateBps, a.Labels[LabelBottleneck])
	}
	o.Set = map[string]string{"flows": "1"}
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, suitetest.LabCaps()); err == nil || !strings.Contains(err.Error(), "want 2-16 flows") {
		t.Errorf("one flow: %v", err)
	}
	o.Set = nil
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, suite.Caps{}); err == nil || !strings.Contains(err.Error(), "bottleneck-rate=none") {
		t.Errorf("no node qdisc: %v", err)
	}
}

// TestPlanOnACluster: on a network measured as it is, with the agents a
// default cluster deploy runs (two pods per node, no node qdisc), both
// placements run with no change made: cross node the path itself is the
// bottleneck. A FIFO is put there only when bottleneck-rate is given, and
// refused without the node qdisc, naming the way out; bottleneck-rate=none
// leaves the lab's FIFO out too; one pod per node has no same-node case.
func TestPlanOnACluster(t *testing.T) {
	agents := []suite.Endpoint{
		{ID: "a1", Name: "agent-a1", Node: "n1", ResponderAddr: "10.0.1.2:5201"}, {ID: "b1", Name: "agent-b1", Node: "n1", ResponderAddr: "10.0.1.3:5201"},
		{ID: "a2", Name: "agent-a2", Node: "n2", ResponderAddr: "10.0.2.2:5201"}, {ID: "b2", Name: "agent-b2", Node: "n2", ResponderAddr: "10.0.2.3:5201"},
	}
	cluster := suite.Caps{AsIs: true, Why: map[suite.Cap]string{suite.CapNodeQdisc: "deploy with --host-agents --qos-agents"}}
	for _, tc := range []struct {
		name    string
		agents  []suite.Endpoint
		set     map[string]string
		caps    suite.Caps
		phases  int
		changes int
		label   string // the cross-node bottleneck label
		err     string
	}{
		{name: "cluster default", agents: agents, caps: cluster, phases: 4, label: "path"},
		{name: "cluster, FIFO asked without node qdisc", agents: agents, caps: cluster, set: map[string]string{"bottleneck-rate": "500M"},
			err: "--host-agents --qos-agents (or --set bottleneck-rate=none"},
		{name: "cluster, FIFO asked with node qdisc", agents: agents, caps: suite.Caps{AsIs: true, Have: []suite.Cap{suite.CapNodeQdisc}},
			set: map[string]string{"bottleneck-rate": "500M"}, phases: 4, changes: 2, label: "500 Mbit/s FIFO"},
		{name: "lab, bottleneck-rate=none", agents: suitetest.LabAgents(), caps: suitetest.LabCaps(), set: map[string]string{"bottleneck-rate": "none"},
			phases: 4, label: "path"},
		{name: "one pod per node", agents: []suite.Endpoint{agents[0], agents[2]}, caps: cluster, set: map[string]string{"placement": "same-node"},
			err: "needs two pods on one node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := suite.DefaultOptions()
			o.Repeat, o.Set = 1, tc.set
			phases, err := Suite{}.Plan(tc.agents, o, tc.caps)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			changes, placements := 0, map[string]bool{}
			for _, ph := range phases {
				changes += len(ph.Changes)
				for _, st := range ph.Steps {
					placements[st.Labels[LabelPlacement]] = true
					if st.Labels[LabelPlacement] == CrossNode && st.Labels[LabelBottleneck] != tc.label {
						t.Errorf("cross-node bottleneck %q, want %q", st.Labels[LabelBottleneck], tc.label)
					}
				}
			}
			if len(phases) != tc.phases || changes != tc.changes || !placements[SameNode] || !placements[CrossNode] {
				t.Errorf("%d phases with %d changes on %v, want %d with %d on both placements", len(phases), changes, placements, tc.phases, tc.changes)
			}
		})
	}
}

// TestRows: per-flow shares and the case's Jain index, total and
// back-off, from measured figures.
func TestRows(t *testing.T) {
	phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: 1, Repeat: 1, Set: map[string]string{"protos": "udp,tcp", "placement": "cross-node"}}, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	figs := [][2]float64{{600e6, 9e9}, {300e6, 9e9}, {480e6, 490e6}, {470e6, 475e6}} // receiver, sender
	var outs []suite.Outcome
	i := 0
	for _, ph := range phases {
		for _, st := range ph.Steps {
			outs = append(outs, suite.Outcome{Step: st, Result: &probe.Result{Kind: st.Spec.Kind,
				ThroughputBps: &probe.SenderReceiver{Receiver: figs[i][0], Sender: figs[i][1]}}})
			i++
		}
	}
	rows := Suite{}.Rows(outs)
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 2 flows + a case row per protocol", len(rows))
	}
	udp1, udpAll, tcpAll := rows[0], rows[2], rows[5]
	if math.Abs(udp1.Median[FigShareOfBottleneck]-60) > 1e-9 || math.Abs(udp1.Median[FigShareOfTotal]-200.0/3) > 1e-9 {
		t.Errorf("udp flow 1: %v", udp1.Median)
	}
	// Jain: (600+300)^2 / (2 (600^2+300^2)) = 0.9
	if udpAll.Labels[LabelFlow] != FlowAll || math.Abs(udpAll.Median[FigFairness]-0.9) > 1e-9 || udpAll.Labels[LabelBackedOff] != "no" ||
		math.Abs(udpAll.Median[FigTotalOfBottleneck]-90) > 1e-9 {
		t.Errorf("udp case: %v %v", udpAll.Labels, udpAll.Median)
	}
	if tcpAll.Labels[LabelBackedOff] != "yes" || tcpAll.Median[FigFairness] < 0.99 {
		t.Errorf("tcp case: %v %v", tcpAll.Labels, tcpAll.Median)
	}
	if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, "0.900") || !strings.Contains(txt, "90.0") {
		t.Errorf("table:\n%s", txt)
	}
}
