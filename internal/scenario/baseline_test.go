package scenario

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

func labAgents() []Endpoint {
	return []Endpoint{
		{ID: "u1", Name: "n1-p1", Node: "node1", IP: "10.244.1.2", ResponderAddr: "10.244.1.2:5201"},
		{ID: "u2", Name: "n1-p2", Node: "node1", IP: "10.244.1.3", ResponderAddr: "10.244.1.3:5201"},
		{ID: "u3", Name: "n2-p1", Node: "node2", IP: "10.244.2.2", ResponderAddr: "10.244.2.2:5201"},
		{ID: "h1", Name: "node1", Node: "node1", IP: "10.170.0.11", ResponderAddr: "10.170.0.11:5201", HostNetwork: true},
		{ID: "h2", Name: "node2", Node: "node2", IP: "10.170.0.12", ResponderAddr: "10.170.0.12:5201", HostNetwork: true},
	}
}

func TestPickPairs(t *testing.T) {
	pairs, err := PickPairs(labAgents())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		PodPodSameNode:  {"u2", "u1"},
		PodPodCrossNode: {"u3", "u1"},
		NodeNode:        {"h2", "h1"},
	}
	for conn, ids := range want {
		p, ok := pairs[conn]
		if !ok || p.Src.ID != ids[0] || p.Dst.ID != ids[1] {
			t.Errorf("%s: got %+v, want %v", conn, p, ids)
		}
	}
	if _, err := PickPairs(labAgents()[:1]); err == nil || !strings.Contains(err.Error(), "no pair") {
		t.Errorf("one agent: err = %v", err)
	}
	onlyPods := labAgents()[:3]
	pairs, _ = PickPairs(onlyPods)
	if _, ok := pairs[NodeNode]; ok {
		t.Error("node-node planned without host-network agents")
	}
}

func TestBaselinePlan(t *testing.T) {
	o := DefaultBaseline()
	o.Repeat, o.Time, o.Backend = 2, time.Second, "vxlan"
	steps, err := Baseline(labAgents(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2*3*4 {
		t.Fatalf("%d steps, want 24", len(steps))
	}
	first := steps[0]
	if first.Connection != PodPodSameNode || first.Measure != MeasureTCP || !first.Exclusive || first.Spec.Target != "10.244.1.2:5201" || first.Backend != "vxlan" {
		t.Errorf("first step = %+v", first)
	}
	for _, s := range steps {
		if s.Measure == MeasurePing && (s.Spec.Target != s.Dst.IP || !s.Exclusive) {
			t.Errorf("ping step = %+v", s)
		}
		if s.Measure == MeasureUDP && (s.Spec.RateBps == nil || *s.Spec.RateBps != o.UDPRateBps) {
			t.Errorf("udp step without its rate: %+v", s.Spec)
		}
	}
	for _, bad := range []BaselineOptions{{Time: 0, Repeat: 1, UDPRateBps: 1, UDPSize: 100, PingCount: 1}, {Time: time.Second, Repeat: 0, UDPRateBps: 1, UDPSize: 100, PingCount: 1}} {
		if _, err := Baseline(labAgents(), bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

func TestRowsMedianAndSpread(t *testing.T) {
	pairs, _ := PickPairs(labAgents())
	var outs []Outcome
	add := func(conn string, rep int, tcpRx, rtt float64) {
		p := pairs[conn]
		outs = append(outs,
			Outcome{Step: Step{Connection: conn, Measure: MeasureTCP, Repeat: rep, Src: p.Src, Dst: p.Dst},
				Result: &probe.Result{Kind: "tcp", ThroughputBps: &probe.SenderReceiver{Sender: tcpRx + 1, Receiver: tcpRx}}},
			Outcome{Step: Step{Connection: conn, Measure: MeasureRR, Repeat: rep, Src: p.Src, Dst: p.Dst},
				Result: &probe.Result{Kind: "rr", RTTms: &probe.Summary{Avg: rtt}}})
	}
	// The source study's Table 2 figures, as three repetitions around them.
	for rep, f := range []float64{0.9, 1.0, 1.1} {
		add(NodeNode, rep, 948e6*f, 0.223*f)
		add(PodPodCrossNode, rep, 796e6*f, 0.375*f)
	}
	outs = append(outs, Outcome{Step: Step{Connection: PodPodSameNode, Measure: MeasureTCP, Src: pairs[PodPodSameNode].Src}, Err: "responder refused"})
	rows := Rows(outs)
	if len(rows) != 3 || rows[0].Connection != PodPodSameNode || rows[1].Connection != PodPodCrossNode || rows[2].Connection != NodeNode {
		t.Fatalf("rows = %+v", rows)
	}
	cross := rows[1]
	if cross.Repetitions != 3 || math.Abs(cross.Median["throughput_bps.receiver"]-796e6) > 1 ||
		math.Abs(cross.Min["throughput_bps.receiver"]-796e6*0.9) > 1 || math.Abs(cross.Max["rtt_ms.avg"]-0.375*1.1) > 1e-9 {
		t.Errorf("cross row = %+v", cross)
	}
	ov, ok := Overhead(rows, cross)
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
	if back["connection"] != PodPodCrossNode || tp["receiver"] == nil || mn["rtt_ms"] == nil {
		t.Errorf("row json = %s", b)
	}
}
