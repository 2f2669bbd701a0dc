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

// TestServiceOverhead: the pod-service row's overhead is against pod-pod
// cross node of its own backend (TCP and UDP throughput drop, rr round
// trip added), its Dst names the Service's address, and it is in the
// JSON; other rows have none.
func TestServiceOverhead(t *testing.T) {
	step := func(conn, backend, measure, via string) suite.Step {
		return suite.Step{Connection: conn, Backend: backend, Measure: measure, Via: via,
			Src: suite.Endpoint{Name: "n2-p1", Node: "n2"}, Dst: suite.Endpoint{Name: "n1-p1", Node: "n1"}}
	}
	var outs []suite.Outcome
	for _, c := range []struct {
		conn, backend, via string
		tcp, udp, rr       float64
	}{
		{suite.PodPodCrossNode, "vxlan", "", 10e9, 500e6, 0.040},
		{suite.PodService, "vxlan", "10.96.1.2:5201", 8e9, 450e6, 0.050},
		{suite.PodPodCrossNode, "host-gw", "", 20e9, 500e6, 0.030},
	} {
		outs = append(outs,
			suite.Outcome{Step: step(c.conn, c.backend, suite.MeasureTCP, c.via), Result: &probe.Result{ThroughputBps: &probe.SenderReceiver{Sender: c.tcp, Receiver: c.tcp}}},
			suite.Outcome{Step: step(c.conn, c.backend, suite.MeasureUDP, c.via), Result: &probe.Result{ThroughputBps: &probe.SenderReceiver{Sender: c.udp, Receiver: c.udp}}},
			suite.Outcome{Step: step(c.conn, c.backend, suite.MeasureRR, c.via), Result: &probe.Result{RTTms: &probe.Summary{P50: c.rr}}})
	}
	rows := suite.Rows(outs)
	suite.SetOverhead(rows)
	var svc suite.Row
	for _, r := range rows {
		if r.Connection == suite.PodService {
			svc = r
		} else if r.ServiceOverhead != nil {
			t.Errorf("%s on %s has a service overhead", r.Connection, r.Backend)
		}
	}
	so := svc.ServiceOverhead
	if so == nil || so.TCPPct == nil || so.UDPPct == nil || so.RRAddedMs == nil {
		t.Fatalf("pod-service row %+v: service overhead %+v", svc, so)
	}
	if math.Abs(*so.TCPPct-20) > 1e-9 || math.Abs(*so.UDPPct-10) > 1e-9 || math.Abs(*so.RRAddedMs-0.010) > 1e-9 {
		t.Errorf("service overhead tcp %v %%, udp %v %%, rr %+v ms; want 20, 10, 0.010 (against vxlan's cross node)", *so.TCPPct, *so.UDPPct, *so.RRAddedMs)
	}
	if svc.Dst != "10.96.1.2:5201 -> n1-p1@n1" {
		t.Errorf("dst %q, want the Service's address first", svc.Dst)
	}
	b, err := json.Marshal(svc)
	if err != nil || !strings.Contains(string(b), `"service_overhead":{"tcp_pct":20`) {
		t.Errorf("json %s (%v) lacks the service overhead", b, err)
	}
}
