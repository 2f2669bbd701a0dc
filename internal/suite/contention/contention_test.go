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

// TestPlan: two UDP and two TCP flows per repetition from two pods on
// node1 to a pod on node2, through a FIFO on node1's uplink; same node
// needs a third pod on a node and is left out of the default here.
func TestPlan(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat = 2
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 4 {
		t.Fatalf("%d phases, want 2 repetitions x (udp, tcp)", len(phases))
	}
	ph := phases[0]
	if !ph.Concurrent || len(ph.Steps) != 2 || len(ph.Changes) != 1 || ph.Changes[0].What != suite.CapNodeQdisc || ph.Changes[0].Member != "node1" {
		t.Fatalf("phase %+v", ph)
	}
	a, b := ph.Steps[0], ph.Steps[1]
	if a.Src.Name == b.Src.Name || a.Dst.Name != b.Dst.Name || a.Dst.Node == a.Src.Node || *a.Spec.RateBps != 10e9 {
		t.Errorf("flows %s→%s and %s→%s at %v", a.Src.Name, a.Dst.Name, b.Src.Name, b.Dst.Name, *a.Spec.RateBps)
	}
	o.Set = map[string]string{"placements": "same-node"}
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, suitetest.LabCaps()); err == nil || !strings.Contains(err.Error(), "--pods-per-node 3") {
		t.Errorf("same node with two pods per node: %v", err)
	}
	o.Set = map[string]string{"flows": "1"}
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, suitetest.LabCaps()); err == nil || !strings.Contains(err.Error(), "want 2-16 flows") {
		t.Errorf("one flow: %v", err)
	}
	o.Set = nil
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, suite.Caps{}); err == nil || !strings.Contains(err.Error(), "placement=same-node") {
		t.Errorf("no node qdisc: %v", err)
	}
}

// TestRows: per-flow shares and the case's Jain index, total and
// back-off, from measured figures.
func TestRows(t *testing.T) {
	phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: 1, Repeat: 1, Set: map[string]string{"protos": "udp,tcp"}}, suitetest.LabCaps())
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
