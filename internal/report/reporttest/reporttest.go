// Package reporttest makes deterministic example runs for tests of the
// report renderings and of pages that show reports. The figures are shaped
// like the ones measured on the lab (shared LAB-FACTS) but generated, not
// measured: they exist to exercise layout and arithmetic, never as results.
package reporttest

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/stats"
	"github.com/cnperf/cnperf/internal/suite"
)

// Start is the fixed start time of every generated result.
var start = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// Start returns the fixed start time of the generated results.
func Start() time.Time { return start }

type path struct {
	conn          string
	tcpGbps       float64
	rttUs         float64
	lossPct       float64
	src, dst      suite.Endpoint
	owdUs, jitter float64
}

func endpoints(node1, node2 string) (podA1, podB1, podA2, host1, host2 suite.Endpoint) {
	podA1 = suite.Endpoint{ID: "uid-a1", Name: "pod-a", Node: node1, IP: "10.244.1.2", ResponderAddr: "10.244.1.2:5201"}
	podB1 = suite.Endpoint{ID: "uid-b1", Name: "pod-b", Node: node1, IP: "10.244.1.3", ResponderAddr: "10.244.1.3:5201"}
	podA2 = suite.Endpoint{ID: "uid-a2", Name: "pod-a", Node: node2, IP: "10.244.2.2", ResponderAddr: "10.244.2.2:5201"}
	host1 = suite.Endpoint{ID: "uid-h1", Name: "host", Node: node1, IP: "10.170.0.11", ResponderAddr: "10.170.0.11:5201", HostNetwork: true}
	host2 = suite.Endpoint{ID: "uid-h2", Name: "host", Node: node2, IP: "10.170.0.12", ResponderAddr: "10.170.0.12:5201", HostNetwork: true}
	return
}

// Baseline returns the outcomes of a baseline over the given backends
// ("host-gw", "vxlan"), three connections each, with reps repetitions.
// scale multiplies every throughput (1 for the reference figures; below 1
// to make a worse run for comparisons).
func Baseline(backends []string, reps int, scale float64) []suite.Outcome {
	var out []suite.Outcome
	a1, b1, a2, h1, h2 := endpoints("node1", "node2")
	for _, be := range backends {
		cross := 45.5
		crossRTT := 42.0
		if be == "vxlan" {
			cross, crossRTT = 38.3, 51.0
		}
		paths := []path{
			{suite.PodPodSameNode, 43.7, 31, 0.02, b1, a1, 11, 0.004},
			{suite.PodPodCrossNode, cross, crossRTT, 0.05, a2, a1, 15, 0.006},
			{suite.NodeNode, 44.5, 28, 0.01, h2, h1, 9, 0.003},
		}
		for rep := 0; rep < reps; rep++ {
			for _, p := range paths {
				wobble := 1 + 0.03*math.Sin(float64(rep*7+len(p.conn)))
				step := func(m string) suite.Step {
					return suite.Step{Connection: p.conn, Backend: be, Measure: m, Repeat: rep, Src: p.src, Dst: p.dst,
						Spec: probe.Spec{Kind: kindOf(m), Target: p.dst.ResponderAddr, Duration: probe.Duration(5 * time.Second)}}
				}
				out = append(out,
					suite.Outcome{Step: step(suite.MeasureTCP), Result: tcp(p, scale*wobble, rep)},
					suite.Outcome{Step: step(suite.MeasureUDP), Result: udp(p, wobble)},
					suite.Outcome{Step: step(suite.MeasureRR), Result: rr(p, wobble)},
					suite.Outcome{Step: step(suite.MeasurePing), Result: ping(p, wobble)},
				)
			}
		}
	}
	return out
}

func kindOf(m string) string {
	switch m {
	case suite.MeasureTCP:
		return probe.KindTCP
	case suite.MeasureUDP:
		return probe.KindUDP
	case suite.MeasureRR:
		return probe.KindRR
	}
	return probe.KindPing
}

func tcp(p path, scale float64, rep int) *probe.Result {
	bps := p.tcpGbps * 1e9 * scale
	r := &probe.Result{Kind: probe.KindTCP, Tool: "cnperf", Src: p.src.IP, Dst: p.dst.ResponderAddr, StartedAt: start.Add(time.Duration(rep) * time.Minute), DurationS: 5,
		ThroughputBps: &probe.SenderReceiver{Sender: bps * 1.002, Receiver: bps},
		Bytes:         &probe.SenderReceiver{Sender: bps * 1.002 * 5 / 8, Receiver: bps * 5 / 8},
		CPUPct:        &probe.SenderReceiver{Sender: 38 + float64(rep), Receiver: 61 - float64(rep)},
		Retransmits:   probe.Int64(int64(rep * 3)), SRTTms: probe.Float(0.05)}
	for i := 0; i < 10; i++ {
		v := bps * (1 + 0.06*math.Sin(float64(i)*1.3+float64(len(p.conn))))
		if i == 0 {
			v *= 0.82 // slow start
		}
		r.Intervals = append(r.Intervals, probe.Interval{StartS: float64(i) * 0.5, EndS: float64(i+1) * 0.5, Bytes: v * 0.5 / 8, ThroughputBps: v, Retransmits: probe.Int64(0)})
	}
	return r
}

func udp(p path, wobble float64) *probe.Result {
	sent := int64(260000)
	lost := int64(float64(sent) * p.lossPct / 100 * wobble)
	r := &probe.Result{Kind: probe.KindUDP, Tool: "cnperf", Src: p.src.IP, Dst: p.dst.ResponderAddr, StartedAt: start, DurationS: 5,
		ThroughputBps: &probe.SenderReceiver{Sender: 500e6, Receiver: 500e6 * (1 - p.lossPct/100*wobble)},
		Bytes:         &probe.SenderReceiver{Sender: 500e6 * 5 / 8, Receiver: 500e6 * 5 / 8 * (1 - p.lossPct/100)},
		Packets:       &probe.PacketCounts{Sent: sent, Received: sent - lost, Lost: lost},
		LossPct:       probe.Float(p.lossPct * wobble), JitterMs: probe.Float(p.jitter * wobble), PPS: probe.Float(52000),
		LatencyMs: summary(p.owdUs*wobble, 3),
		Histogram: hist(p.owdUs*wobble, 3, 2, 200),
		Clock:     &probe.ClockInfo{SameClock: true}}
	for i := 0; i < 10; i++ {
		pk := sent / 10
		r.Intervals = append(r.Intervals, probe.Interval{StartS: float64(i) * 0.5, EndS: float64(i+1) * 0.5, Bytes: 500e6 * 0.5 / 8, ThroughputBps: 500e6, Packets: &pk})
	}
	return r
}

func rr(p path, wobble float64) *probe.Result {
	return &probe.Result{Kind: probe.KindRR, Tool: "cnperf", Src: p.src.IP, Dst: p.dst.ResponderAddr, StartedAt: start, DurationS: 5,
		RTTms: summary(p.rttUs*wobble, 8), AppRTTms: summary(p.rttUs*wobble+4, 8), TransactionsPerS: probe.Float(1e6 / (p.rttUs * wobble)),
		Histogram: hist(p.rttUs*wobble, 8, 5, 200)}
}

func ping(p path, wobble float64) *probe.Result {
	return &probe.Result{Kind: probe.KindPing, Tool: "cnperf", Src: p.src.IP, Dst: p.dst.IP, StartedAt: start, DurationS: 0.2,
		RTTms: summary(p.rttUs*1.4*wobble, 10), LossPct: probe.Float(0)}
}

// summary makes a right-skewed distribution's summary around medUs (µs),
// in ms.
func summary(medUs, spreadUs float64) *stats.Summary {
	ms := func(us float64) float64 { return math.Round(us*10) / 10000 }
	return &stats.Summary{Min: ms(medUs - spreadUs), Avg: ms(medUs + spreadUs*0.3), Max: ms(medUs + spreadUs*40),
		Stdev: ms(spreadUs), P50: ms(medUs), P90: ms(medUs + spreadUs*1.3), P99: ms(medUs + spreadUs*4), P999: ms(medUs + spreadUs*9), Count: 100000}
}

// hist makes a log-normal-like histogram with bins of widthUs.
func hist(medUs, spreadUs, widthUs float64, bins int) *probe.Histogram {
	h := &probe.Histogram{BinWidthUs: widthUs, Counts: make([]int64, bins)}
	sigma := spreadUs / medUs
	for i := range h.Counts {
		x := (float64(i) + 0.5) * widthUs
		if x <= 0 {
			continue
		}
		z := (math.Log(x) - math.Log(medUs)) / sigma
		h.Counts[i] = int64(math.Round(20000 * math.Exp(-z*z/2) / x * widthUs))
	}
	return h
}

// QoSMatrix returns a qos-priority matrix of the foreground flow's mean
// round trip per variant and marking, shaped like LAB-FACTS's table.
func QoSMatrix() report.Matrix {
	m := report.Matrix{Title: "qos-priority: foreground round trip under a 1 Gbit/s bottleneck", Metric: "rtt_ms.avg", Label: "ping round trip avg",
		RowLabel: "where the queue is", ColLabel: "foreground marking"}
	m.Rows = []string{"no bottleneck", "tbf FIFO", "pfifo_fast on veth", "htb priority", "vxlan, outer TOS 0", "vxlan, tos inherit"}
	m.Cols = []string{"unmarked", "TOS 0x08", "TOS 0x10", "EF"}
	m.Values = [][]float64{
		{0.019, 0.019, 0.018, 0.019},
		{11.3, 11.4, 11.2, 11.4},
		{0.025, 0.024, 0.015, 0.016},
		{11.1, 11.2, 10.9, 0.026},
		{10.1, 10.0, 10.2, 10.1},
		{10.3, 10.2, 10.1, 0.039},
	}
	return m
}

// Example returns a finished two-backend baseline report with a
// qos-priority matrix, two shaping series and a node mesh heat map.
func Example() *report.Report {
	outcomes := Baseline([]string{"host-gw", "vxlan"}, 3, 1)
	r := report.FromOutcomes("run-example", "baseline", outcomes)
	r.CreatedAt = start
	r.Params = map[string]string{"time": "5s", "repeat": "3", "backends": "host-gw,vxlan"}
	r.Matrices = append(r.Matrices, QoSMatrix())
	if m, ok := report.NodeMatrix(Mesh(4)); ok {
		r.Matrices = append(r.Matrices, m)
	}
	r.Shaping = []report.Shaping{
		{Name: "pod egress 10 Mbit/s, burst 32 KiB", LimitBps: 10e6, Series: Shaped(10e6, 1.07, 5)},
		{Name: "pod egress 10 Mbit/s, burst 4 MiB", LimitBps: 10e6, Series: Shaped(10e6, 7.7, 5)},
	}
	return r
}

// Shaped returns receiver intervals of a 10 Mbit/s shaped flow whose
// first half second overshoots by factor first, over secs seconds in
// 0.5 s intervals.
func Shaped(limitBps, first float64, secs int) []probe.Interval {
	var out []probe.Interval
	for i := 0; i < secs*2; i++ {
		v := limitBps * (0.985 + 0.01*math.Sin(float64(i)))
		switch i {
		case 0:
			v = limitBps * first
		case 1:
			v = limitBps * (1 + (first-1)/6)
		}
		out = append(out, probe.Interval{StartS: float64(i) * 0.5, EndS: float64(i+1) * 0.5, Bytes: v * 0.5 / 8, ThroughputBps: v})
	}
	return out
}

// Mesh returns ping outcomes between every ordered pair of n nodes, the
// round trip growing with the distance of their indices.
func Mesh(n int) []suite.Outcome {
	var out []suite.Outcome
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			src := suite.Endpoint{Name: "host", Node: fmt.Sprintf("node%d", i+1), HostNetwork: true}
			dst := suite.Endpoint{Name: "host", Node: fmt.Sprintf("node%d", j+1), HostNetwork: true}
			rtt := 0.03 + 0.01*math.Abs(float64(i-j)) + 0.002*float64(i)
			out = append(out, suite.Outcome{Step: suite.Step{Connection: suite.NodeNode, Measure: suite.MeasurePing, Src: src, Dst: dst},
				Result: &probe.Result{Kind: probe.KindPing, RTTms: &stats.Summary{Avg: rtt, P50: rtt}}})
		}
	}
	return out
}

// Text renders rows as `cnperf run` and `cnperf report` print them for
// the terminal: the suite's tables (its Presentation), failed steps and
// verdicts.
func Text(t testing.TB, s suite.Suite, rows []suite.Row) string {
	t.Helper()
	r := &report.Report{RunID: "r1", Suite: s.Name(), Status: "succeeded", Rows: rows, Present: suite.PresentationOf(s)}
	r.AddSuiteCharts()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
