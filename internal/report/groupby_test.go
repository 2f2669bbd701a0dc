package report

import (
	"math"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestGroupBy pools three runs by kernel into two groups and compares
// them: the 6.1 group has both its runs' measurements as repetitions.
func TestGroupBy(t *testing.T) {
	pairs, _ := suite.PickPairs(suitetest.LabAgents())
	run := func(id, kernel string, bps float64) *Report {
		p := pairs[suite.PodPodCrossNode]
		outs := []suite.Outcome{{Step: suite.Step{Connection: suite.PodPodCrossNode, Measure: suite.MeasureTCP, Src: p.Src, Dst: p.Dst},
			Result: &probe.Result{Kind: "tcp", ThroughputBps: &probe.SenderReceiver{Sender: bps, Receiver: bps}}}}
		return &Report{RunID: id, Suite: "baseline", Outcomes: outs, Rows: suite.Rows(outs),
			Environment: &hostinfo.Environment{Platform: "lab", Nodes: []hostinfo.Node{{Name: "n1", Kernel: kernel}, {Name: "n2", Kernel: kernel}}}}
	}
	runs := []*Report{run("a", "6.1", 10e9), run("b", "6.6", 20e9), run("c", "6.1", 12e9)}
	groups, err := GroupBy(builtin.Registry(), runs, "kernel")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].RunID != "kernel 6.1 (a, c)" || groups[1].RunID != "kernel 6.6 (b)" {
		t.Fatalf("groups: %q, %q", groups[0].RunID, groups[len(groups)-1].RunID)
	}
	row := groups[0].Rows[0]
	if row.Repetitions != 2 || math.Abs(row.Median["throughput_bps.receiver"]-11e9) > 1 || row.Min["throughput_bps.receiver"] != 10e9 {
		t.Errorf("pooled row: %d reps, median %v, min %v", row.Repetitions, row.Median["throughput_bps.receiver"], row.Min["throughput_bps.receiver"])
	}
	cmp, err := Compare(groups, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := cmp.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "kernel 6.6 (b)") {
		t.Errorf("comparison does not name the groups:\n%s", b.String())
	}
	if _, err := GroupBy(builtin.Registry(), runs, "colour"); err == nil || !strings.Contains(err.Error(), "want one of") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := GroupBy(builtin.Registry(), runs, "platform"); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("one group: %v", err)
	}
}
