package report_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// compareOutput is a cni-compare over two backends with known figures:
// each backend's rows from three repetitions.
func compareOutput(t *testing.T) report.Output {
	t.Helper()
	pairs, err := suite.PickPairs(suitetest.LabAgents())
	if err != nil {
		t.Fatal(err)
	}
	gbps := map[string]map[string]float64{
		"host-gw": {suite.PodPodSameNode: 40, suite.PodPodCrossNode: 36, suite.NodeNode: 45},
		"vxlan":   {suite.PodPodSameNode: 40, suite.PodPodCrossNode: 27, suite.NodeNode: 45},
	}
	var reps []suite.Report
	for i, be := range []string{"host-gw", "vxlan"} {
		var outs []suite.Outcome
		for rep := 0; rep < 3; rep++ {
			for _, conn := range []string{suite.PodPodSameNode, suite.PodPodCrossNode, suite.NodeNode} {
				p := pairs[conn]
				k := float64(rep - 1) // -1, 0, 1: median at rep 1
				g := gbps[be][conn] + k
				step := func(m string) suite.Step {
					return suite.Step{Connection: conn, Backend: be, Measure: m, Repeat: rep, Src: p.Src, Dst: p.Dst}
				}
				outs = append(outs,
					suite.Outcome{Step: step(suite.MeasureTCP), Result: &probe.Result{
						ThroughputBps: &probe.SenderReceiver{Sender: g * 1e9, Receiver: g * 0.999e9},
						Bytes:         &probe.SenderReceiver{Sender: g * 1e9 / 8 * 5, Receiver: g * 0.999e9 / 8 * 5},
						CPUPct:        &probe.SenderReceiver{Sender: 70 + k, Receiver: 80 + k}}},
					suite.Outcome{Step: step(suite.MeasureUDP), Result: &probe.Result{
						ThroughputBps: &probe.SenderReceiver{Sender: 500e6, Receiver: 499e6 + k*1e6}, LossPct: probe.Float(0.2 + k/10)}},
					suite.Outcome{Step: step(suite.MeasureRR), Result: &probe.Result{RTTms: &probe.Summary{Avg: 0.03 + k/100}}},
					suite.Outcome{Step: step(suite.MeasurePing), Result: &probe.Result{RTTms: &probe.Summary{Avg: 0.05 + k/100}}},
				)
			}
		}
		outs[0].Result, outs[0].Err = nil, "failed: connection refused"
		reps = append(reps, suite.Report{Suite: "cni-compare", RunIDs: []string{[]string{"r1", "r2"}[i]},
			Options: suite.Options{Time: 5 * time.Second, Repeat: 3, Backend: be}, Rows: suite.Rows(outs)})
	}
	return report.NewOutput(reps...)
}

func TestOutputFormats(t *testing.T) {
	out := compareOutput(t)
	out.Checks = suite.Evaluate([]suite.Objective{{Expr: "loss_pct < 1", Metric: "loss_pct", Op: "<", Threshold: 1}}, out.Rows)
	for _, c := range []struct {
		file  string
		write func(*bytes.Buffer) error
	}{
		{"output-compare.txt", func(b *bytes.Buffer) error { return out.WriteTable(b) }},
		{"output-compare.md", func(b *bytes.Buffer) error { return out.WriteMarkdown(b) }},
		{"output-compare.csv", func(b *bytes.Buffer) error { return out.WriteCSV(b) }},
	} {
		t.Run(c.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := c.write(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, c.file, b.Bytes())
		})
	}
}

func TestOutputJSON(t *testing.T) {
	out := compareOutput(t)
	var b bytes.Buffer
	if err := out.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RunID  string           `json:"run_id"`
		RunIDs []string         `json:"run_ids"`
		Rows   []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.RunID != "r1" || strings.Join(doc.RunIDs, ",") != "r1,r2" || len(doc.Rows) != 6 {
		t.Fatalf("run_id %q run_ids %v rows %d", doc.RunID, doc.RunIDs, len(doc.Rows))
	}
	cross := doc.Rows[4] // vxlan, pod-pod cross node
	get := func(obj map[string]any, path ...string) float64 {
		var cur any = obj
		for _, p := range path {
			m, _ := cur.(map[string]any)
			cur = m[p]
		}
		v, _ := cur.(float64)
		return v
	}
	if cross["connection"] != suite.PodPodCrossNode || cross["backend"] != "vxlan" || cross["src"] != "n2-p1@node2" {
		t.Errorf("row labels %v %v %v", cross["connection"], cross["backend"], cross["src"])
	}
	if v := get(cross, "throughput_bps", "sender"); v != 27e9 {
		t.Errorf("throughput_bps.sender median %v, want 27e9", v)
	}
	if lo, hi := get(cross, "min", "throughput_bps", "sender"), get(cross, "max", "throughput_bps", "sender"); lo != 26e9 || hi != 28e9 {
		t.Errorf("spread %v-%v, want 26e9-28e9", lo, hi)
	}
	if v := get(cross, "overhead_pct"); v < 39.9 || v > 40.1 {
		t.Errorf("overhead_pct %v, want 40 (27 vs 45 Gbit/s)", v)
	}
	if v := get(cross, "rtt_ms", "avg"); v < 0.0299 || v > 0.0301 {
		t.Errorf("rtt_ms.avg %v", v)
	}
	if _, ok := doc.Rows[2]["overhead_pct"]; ok {
		t.Error("node-node row has an overhead against itself")
	}
}

func TestOutputJSONMissingSLOValue(t *testing.T) {
	out := compareOutput(t)
	out.Checks = suite.Evaluate([]suite.Objective{{Connection: suite.NodeNode, Expr: "jitter_ms < 1", Metric: "nope_ms", Op: "<", Threshold: 1}}, out.Rows)
	var b bytes.Buffer
	if err := out.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SLO []map[string]any `json:"slo"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.SLO) != 1 || doc.SLO[0]["value"] != nil || doc.SLO[0]["pass"] != false || doc.SLO[0]["connection"] != suite.NodeNode {
		t.Errorf("slo %v, want one failed check with value null", doc.SLO)
	}
}
