package suite_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestPickPairs(t *testing.T) {
	pairs, err := suite.PickPairs(suitetest.LabAgents())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		suite.PodPodSameNode:  {"u2", "u1"},
		suite.PodPodCrossNode: {"u3", "u1"},
		suite.NodeNode:        {"h2", "h1"},
	}
	for conn, ids := range want {
		p, ok := pairs[conn]
		if !ok || p.Src.ID != ids[0] || p.Dst.ID != ids[1] {
			t.Errorf("%s: got %+v, want %v", conn, p, ids)
		}
	}
	if _, err := suite.PickPairs(suitetest.LabAgents()[:1]); err == nil || !strings.Contains(err.Error(), "no pair") {
		t.Errorf("one agent: err = %v", err)
	}
	onlyPods := suitetest.LabAgents()[:3]
	pairs, _ = suite.PickPairs(onlyPods)
	if _, ok := pairs[suite.NodeNode]; ok {
		t.Error("node-node planned without host-network agents")
	}
}

func TestRowsMedianAndSpread(t *testing.T) {
	pairs, _ := suite.PickPairs(suitetest.LabAgents())
	var outs []suite.Outcome
	add := func(conn string, rep int, tcpRx, rtt float64) {
		p := pairs[conn]
		outs = append(outs,
			suite.Outcome{Step: suite.Step{Connection: conn, Measure: suite.MeasureTCP, Repeat: rep, Src: p.Src, Dst: p.Dst},
				Result: &probe.Result{Kind: "tcp", ThroughputBps: &probe.SenderReceiver{Sender: tcpRx + 1, Receiver: tcpRx}}},
			suite.Outcome{Step: suite.Step{Connection: conn, Measure: suite.MeasureRR, Repeat: rep, Src: p.Src, Dst: p.Dst},
				Result: &probe.Result{Kind: "rr", RTTms: &probe.Summary{Avg: rtt}}})
	}
	// The source study's Table 2 figures, as three repetitions around them,
	// in true units: its "Mbps" are iperf2's -f M, MBytes (2^20) per second
	// (docs/lab.md), so 796 is 6.68 Gbit/s.
	mbytes := func(v float64) float64 { return v * 8 * (1 << 20) }
	for rep, f := range []float64{0.9, 1.0, 1.1} {
		add(suite.NodeNode, rep, mbytes(948)*f, 0.223*f)
		add(suite.PodPodCrossNode, rep, mbytes(796)*f, 0.375*f)
	}
	outs = append(outs, suite.Outcome{Step: suite.Step{Connection: suite.PodPodSameNode, Measure: suite.MeasureTCP, Src: pairs[suite.PodPodSameNode].Src}, Err: "responder refused"})
	rows := suite.Rows(outs)
	if len(rows) != 3 || rows[0].Connection != suite.PodPodSameNode || rows[1].Connection != suite.PodPodCrossNode || rows[2].Connection != suite.NodeNode {
		t.Fatalf("rows = %+v", rows)
	}
	cross := rows[1]
	if cross.Repetitions != 3 || math.Abs(cross.Median["throughput_bps.receiver"]-mbytes(796)) > 1 ||
		math.Abs(cross.Min["throughput_bps.receiver"]-mbytes(796)*0.9) > 1 || math.Abs(cross.Max["rtt_ms.avg"]-0.375*1.1) > 1e-9 {
		t.Errorf("cross row = %+v", cross)
	}
	ov, ok := suite.Overhead(rows, cross)
	if !ok || math.Abs(ov-16.03) > 0.01 {
		t.Errorf("overhead = %v %v, want 16.03 %%", ov, ok)
	}
	if len(rows[0].Errors) != 1 || !strings.Contains(rows[0].Errors[0], "responder refused") {
		t.Errorf("same-node errors = %v", rows[0].Errors)
	}
	b, err := json.Marshal(cross)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	tp, _ := back["throughput_bps"].(map[string]any)
	mn, _ := back["min"].(map[string]any)
	if back["connection"] != suite.PodPodCrossNode || tp["receiver"] == nil || mn["rtt_ms"] == nil {
		t.Errorf("row json = %s", b)
	}
}
