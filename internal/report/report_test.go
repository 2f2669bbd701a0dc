package report_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("%s differs from the golden file at line %d:\n got: %s\nwant: %s\n(run go test -update if the change is intended)", name, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%s differs from the golden file in length: got %d lines, want %d", name, len(gl), len(wl))
	}
}

func TestGoldenRenderings(t *testing.T) {
	r := reporttest.Example()
	// A baseline over two backends as its suite presents it: its table per
	// backend, the backends compared, a failed step and SLO checks.
	outs := reporttest.Baseline([]string{"host-gw", "vxlan"}, 3, 1)
	outs[0].Result, outs[0].Err = nil, "failed: connection refused"
	st := report.FromOutcomes("run-suite", "baseline", outs)
	st.Rows = baseline.Suite{}.Rows(outs)
	suite.SetOverhead(st.Rows)
	st.Present = baseline.Suite{}.Presentation()
	st.Params = map[string]string{"time": "5s", "repeat": "3"}
	st.Checks = suite.Evaluate([]suite.Objective{{Expr: "loss_pct < 1", Metric: "loss_pct", Op: "<", Threshold: 1}}, st.Rows)
	tests := []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"baseline.txt", func(b *bytes.Buffer) error { return r.WriteText(b) }},
		{"baseline.md", func(b *bytes.Buffer) error { return r.WriteMarkdown(b) }},
		{"baseline.csv", func(b *bytes.Buffer) error { return r.WriteCSV(b) }},
		{"baseline-suite.txt", func(b *bytes.Buffer) error { return st.WriteText(b) }},
		{"baseline-suite.md", func(b *bytes.Buffer) error { return st.WriteMarkdown(b) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
}

// svgDoc is the part of an SVG's structure the tests check.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []svgNode  `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// count returns how many descendants have the class, and their texts.
func (n svgNode) find(class string) []svgNode {
	var out []svgNode
	for _, c := range n.Nodes {
		if strings.Fields(c.attr("class")) != nil && c.attr("class") == class {
			out = append(out, c)
		}
		out = append(out, c.find(class)...)
	}
	return out
}

func (n svgNode) text() string {
	s := n.Text
	for _, c := range n.Nodes {
		if c.XMLName.Local != "title" {
			s += c.text()
		}
	}
	return strings.TrimSpace(s)
}

func texts(ns []svgNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.text())
	}
	return out
}

func TestSVGStructure(t *testing.T) {
	charts := map[string]*report.Chart{}
	for _, c := range reporttest.Example().Charts() {
		charts[c.ID] = c
	}
	tests := []struct {
		id      string
		counts  map[string]int // class → number of elements
		ylabel  string
		xlabel  string
		legends []string
	}{
		{id: "bars-throughput", counts: map[string]int{"bar": 6, "whisker": 6, "xcat": 3, "legend-item": 2},
			ylabel: "Throughput (Gbit/s)", legends: []string{"host-gw", "vxlan"}},
		{id: "bars-rtt", counts: map[string]int{"bar": 12, "xcat": 3, "legend-item": 4}, ylabel: "Round trip (µs)"},
		{id: "throughput-time", counts: map[string]int{"series": 6, "legend-item": 6},
			ylabel: "Throughput (Gbit/s)", xlabel: "Time (s)"},
		{id: "hist-rtt", counts: map[string]int{"series": 6, "area": 6}, ylabel: "Share of samples (%)", xlabel: "Latency (µs)"},
		{id: "cdf-rtt", counts: map[string]int{"series": 6}, ylabel: "Samples at or below (%)", xlabel: "Latency (µs)"},
		{id: "hist-owd", counts: map[string]int{"series": 6}},
		{id: "matrix-1", counts: map[string]int{"cell": 24, "rowhead": 6, "colhead": 4, "colorbar": 20}},
		{id: "matrix-2", counts: map[string]int{"cell": 16, "rowhead": 4, "colhead": 4}},
		{id: "shaping-2", counts: map[string]int{"series": 2, "ref": 1, "legend-item": 2}, ylabel: "Throughput (Mbit/s)", xlabel: "Time (s)"},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			c, ok := charts[tc.id]
			if !ok {
				t.Fatalf("chart %s missing; have %v", tc.id, keys(charts))
			}
			var b bytes.Buffer
			if err := report.WriteSVG(&b, c); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.id+".svg", b.Bytes())
			var root svgNode
			if err := xml.Unmarshal(b.Bytes(), &root); err != nil {
				t.Fatalf("not well-formed XML: %v", err)
			}
			if root.XMLName.Local != "svg" {
				t.Fatalf("root element %q, want svg", root.XMLName.Local)
			}
			for class, want := range tc.counts {
				if got := len(root.find(class)); got != want {
					t.Errorf("%d elements of class %q, want %d", got, class, want)
				}
			}
			if tc.ylabel != "" {
				if got := texts(root.find("ylabel")); len(got) != 1 || got[0] != tc.ylabel {
					t.Errorf("y label %q, want %q", got, tc.ylabel)
				}
				if n := len(root.find("ytick")); n < 3 {
					t.Errorf("%d y ticks, want at least 3", n)
				}
			}
			if tc.xlabel != "" {
				if got := texts(root.find("xlabel")); len(got) != 1 || got[0] != tc.xlabel {
					t.Errorf("x label %q, want %q", got, tc.xlabel)
				}
			}
			if tc.legends != nil {
				if got := texts(root.find("legend-item")); strings.Join(got, ",") != strings.Join(tc.legends, ",") {
					t.Errorf("legend %q, want %q", got, tc.legends)
				}
			}
		})
	}
}

func keys(m map[string]*report.Chart) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Ticks must be increasing, evenly spaced and inside the plot.
func TestTicksInsidePlotAndEven(t *testing.T) {
	for _, c := range reporttest.Example().Charts() {
		for _, ticks := range [][]report.Tick{c.XTicks, c.YTicks} {
			for i := 2; i < len(ticks); i++ {
				d1, d2 := ticks[i-1].Pos-ticks[i-2].Pos, ticks[i].Pos-ticks[i-1].Pos
				if math.Abs(d1-d2) > 0.01 {
					t.Errorf("%s: uneven ticks %v", c.ID, ticks)
				}
			}
			for _, tk := range ticks {
				in := tk.Pos >= c.Plot.X-0.01 && tk.Pos <= c.Plot.X+c.Plot.W+0.01 || tk.Pos >= c.Plot.Y-0.01 && tk.Pos <= c.Plot.Y+c.Plot.H+0.01
				if !in {
					t.Errorf("%s: tick %q at %.1f outside the plot %+v", c.ID, tk.Label, tk.Pos, c.Plot)
				}
			}
		}
	}
}

// A bar's height must be proportional to its value.
func TestBarHeightsProportional(t *testing.T) {
	c := report.BarChart(report.BarSpec{ID: "b", Title: "t", YName: "Throughput", YUnit: "bit/s",
		Categories: []string{"a", "b"}, Groups: []string{"g"}, Values: [][]float64{{10e9, 40e9}}})
	if len(c.Bars) != 2 {
		t.Fatalf("%d bars, want 2", len(c.Bars))
	}
	if r := c.Bars[1].H / c.Bars[0].H; math.Abs(r-4) > 0.01 {
		t.Errorf("bar height ratio %.3f, want 4", r)
	}
	if c.YLabel != "Throughput (Gbit/s)" {
		t.Errorf("y label %q", c.YLabel)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{4.28e9, "bit/s", "4.28 Gbit/s"},
		{45.5e9, "bit/s", "45.5 Gbit/s"},
		{500e6, "bit/s", "500 Mbit/s"},
		{0.019, "ms", "19.0 µs"},
		{1.5, "ms", "1.50 ms"},
		{33200, "tx/s", "33.2 ktx/s"},
		{11.3, "ms", "11.3 ms"},
		{7.5, "%", "7.50 %"},
		{0, "%", "0 %"},
		{3, "", "3"},
		{18.7e9, "B", "18.7 GB"},
		{math.NaN(), "ms", "–"},
	}
	for _, tc := range tests {
		if got := report.Format(tc.v, tc.unit); got != tc.want {
			t.Errorf("Format(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
	if got := report.FormatRange(4.28e9, 4.1e9, 4.4e9, "bit/s"); got != "4.28 Gbit/s (4.10–4.40)" {
		t.Errorf("FormatRange = %q", got)
	}
}

func TestInProgressReport(t *testing.T) {
	outcomes := reporttest.Baseline([]string{"host-gw"}, 1, 1)
	r := report.FromOutcomes("run-live", "baseline", outcomes[:3])
	r.Status, r.Progress = "running", report.Progress{Done: 3, Total: 12}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "in progress: 25 % done") {
		t.Errorf("text report of a running run does not say its progress:\n%s", b.String())
	}
	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `id="in-progress"`) || !strings.Contains(b.String(), "3/12 measurements") {
		t.Errorf("HTML of a running run lacks its progress")
	}
	// A run with nothing measured yet still renders.
	empty := &report.Report{RunID: "run-new", Suite: "baseline", Status: "created", Progress: report.Progress{Total: 12}}
	b.Reset()
	if err := empty.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No results yet") {
		t.Errorf("HTML of an empty run does not say there are no results")
	}
}

func TestMatrixJSONNaN(t *testing.T) {
	m := report.Matrix{Title: "m", Metric: "rtt_ms.p50", Rows: []string{"a"}, Cols: []string{"a", "b"}, Values: [][]float64{{math.NaN(), 1.5}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"values":[[null,1.5]]`) {
		t.Errorf("json %s: want null for the unmeasured cell", b)
	}
	var back report.Matrix
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back.Values[0][0]) || back.Values[0][1] != 1.5 {
		t.Errorf("round trip gave %v", back.Values)
	}
	if err := (report.Matrix{Rows: []string{"a"}, Cols: []string{"x"}, Values: [][]float64{{1, 2}}}).Validate(); err == nil {
		t.Error("Validate accepted a row with more values than columns")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	r := reporttest.Example()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RunID string           `json:"run_id"`
		Rows  []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.RunID != "run-example" || len(doc.Rows) != 6 {
		t.Fatalf("run %q with %d rows, want run-example with 6", doc.RunID, len(doc.Rows))
	}
	tp := doc.Rows[0]["throughput_bps"].(map[string]any)["receiver"].(float64)
	if want := r.Rows[0].Median["throughput_bps.receiver"]; tp != want {
		t.Errorf("row 0 receiver throughput %v in JSON, %v in the report", tp, want)
	}
}

// keyPaths lists an iperf3 document's object keys as paths ("end.sum_sent.bytes").
func keyPaths(prefix string, v any, out map[string]bool) {
	switch t := v.(type) {
	case map[string]any:
		for k, sub := range t {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			keyPaths(p, sub, out)
		}
	case []any:
		for _, sub := range t {
			keyPaths(prefix+"[]", sub, out)
		}
	}
}

func TestIperf3Compatible(t *testing.T) {
	r := reporttest.Example()
	var b bytes.Buffer
	if err := r.WriteIperf3(&b); err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	if err := json.Unmarshal(b.Bytes(), &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) != 36 { // 2 backends × 3 connections × 3 repetitions × (tcp, udp)
		t.Fatalf("%d iperf3 documents, want 36", len(docs))
	}
	for _, tc := range []struct {
		proto, real string
		doc         map[string]any
	}{{"TCP", "testdata/iperf3-real-tcp.json", docs[0]}, {"UDP", "testdata/iperf3-real-udp.json", docs[1]}} {
		raw, err := os.ReadFile(tc.real)
		if err != nil {
			t.Fatal(err)
		}
		var real map[string]any
		if err := json.Unmarshal(raw, &real); err != nil {
			t.Fatal(err)
		}
		want, got := map[string]bool{}, map[string]bool{}
		keyPaths("", real, want)
		keyPaths("", tc.doc, got)
		for p := range got {
			if !want[p] && p != "extra_data" {
				t.Errorf("%s: key %s is not in real iperf3 output", tc.proto, p)
			}
		}
		for _, p := range []string{"start.test_start.protocol", "intervals[].sum.bits_per_second", "end.sum_sent.bits_per_second", "end.sum_received.bits_per_second"} {
			if !got[p] {
				t.Errorf("%s: key %s missing", tc.proto, p)
			}
		}
		if ts := tc.doc["start"].(map[string]any)["test_start"].(map[string]any)["protocol"]; ts != tc.proto {
			t.Errorf("protocol %v, want %s", ts, tc.proto)
		}
	}
	// The figures are the result's own.
	res := r.Outcomes[0].Result
	rcv := docs[0]["end"].(map[string]any)["sum_received"].(map[string]any)["bits_per_second"].(float64)
	if rcv != res.ThroughputBps.Receiver {
		t.Errorf("sum_received %v, result %v", rcv, res.ThroughputBps.Receiver)
	}
	udp := docs[1]["end"].(map[string]any)["sum"].(map[string]any)
	if udp["lost_percent"].(float64) != *r.Outcomes[1].Result.LossPct {
		t.Errorf("udp lost_percent %v, result %v", udp["lost_percent"], *r.Outcomes[1].Result.LossPct)
	}
	// A run without tcp/udp results is refused with a reason.
	pingOnly := report.FromOutcomes("run-ping", "mesh", reporttest.Mesh(3))
	if err := pingOnly.WriteIperf3(&b); err == nil || !strings.Contains(err.Error(), "no tcp or udp results") {
		t.Errorf("iperf3 export of a ping-only run: err %v", err)
	}
}

// TestIperf3OneResult: a run with one tcp result exports one iperf3
// document, an object as iperf3 --json writes it (not an array), with
// start.connected from the result's two ends.
func TestIperf3OneResult(t *testing.T) {
	o := reporttest.Example().Outcomes[0]
	res := *o.Result
	res.Src, res.Dst = "10.244.1.5:40112", "10.244.2.7:5201"
	o.Result = &res
	one := report.FromOutcomes("run-one", "mesh", []suite.Outcome{o})
	var b bytes.Buffer
	if err := one.WriteIperf3(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Start struct {
			Connected []map[string]any `json:"connected"`
		} `json:"start"`
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("one result: not one iperf3 document (an object): %v\n%s", err, b.String())
	}
	if doc.End.SumReceived.BitsPerSecond != res.ThroughputBps.Receiver {
		t.Errorf(".end.sum_received.bits_per_second %v, result %v", doc.End.SumReceived.BitsPerSecond, res.ThroughputBps.Receiver)
	}
	if len(doc.Start.Connected) != 1 {
		t.Fatalf("start.connected %v, want one stream", doc.Start.Connected)
	}
	c := doc.Start.Connected[0]
	if got := fmt.Sprintf("%v:%v", c["local_host"], c["local_port"]); got != res.Src {
		t.Errorf("start.connected local %s, result src %s", got, res.Src)
	}
	if got := fmt.Sprintf("%v:%v", c["remote_host"], c["remote_port"]); got != res.Dst {
		t.Errorf("start.connected remote %s, result dst %s", got, res.Dst)
	}
}

func TestCompare(t *testing.T) {
	base := func(id string, scale float64, reps int) *report.Report {
		return report.FromOutcomes(id, "baseline", reporttest.Baseline([]string{"host-gw"}, reps, scale))
	}
	tests := []struct {
		name       string
		runs       []*report.Report
		wantErr    bool
		worse      int
		worseFirst string // metric of the first regression
	}{
		{name: "same figures", runs: []*report.Report{base("a", 1, 3), base("b", 1, 3)}, worse: 0},
		{name: "2 % slower is inside the spread", runs: []*report.Report{base("a", 1, 3), base("b", 0.98, 3)}, worse: 0},
		// TCP throughput (sender, receiver) and bytes (neutral) of 3 connections.
		{name: "20 % slower is a regression", runs: []*report.Report{base("a", 1, 3), base("b", 0.8, 3)}, worse: 6, worseFirst: "throughput_bps.sender"},
		{name: "20 % faster is not a regression", runs: []*report.Report{base("a", 1, 3), base("b", 1.2, 3)}, worse: 0},
		{name: "three runs", runs: []*report.Report{base("a", 1, 3), base("b", 1, 3), base("c", 0.7, 3)}, worse: 6},
		{name: "single repetitions use the tolerance", runs: []*report.Report{base("a", 1, 1), base("b", 0.97, 1)}, worse: 0},
		{name: "one run", runs: []*report.Report{base("a", 1, 1)}, wantErr: true},
		{name: "different suites", runs: []*report.Report{base("a", 1, 1), {RunID: "q", Suite: "qos-priority"}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := report.Compare(tc.runs, report.CompareOptions{})
			if tc.wantErr {
				if !errors.Is(err, report.ErrNotComparable) {
					t.Fatalf("err %v, want ErrNotComparable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Worse != tc.worse {
				var flagged []string
				for _, l := range c.Lines {
					for _, o := range l.Others {
						if o.Verdict == report.Regression {
							flagged = append(flagged, l.Connection+" "+l.Metric)
						}
					}
				}
				t.Fatalf("%d regressions, want %d: %v", c.Worse, tc.worse, flagged)
			}
			if tc.worseFirst != "" {
				for _, l := range c.Lines {
					if l.Others[0].Verdict == report.Regression {
						if l.Metric != tc.worseFirst {
							t.Errorf("first regression %s, want %s", l.Metric, tc.worseFirst)
						}
						break
					}
				}
			}
		})
	}
}

// Runs of different single backends are compared connection by connection.
func TestCompareBackends(t *testing.T) {
	hg := report.FromOutcomes("hg", "baseline", reporttest.Baseline([]string{"host-gw"}, 3, 1))
	vx := report.FromOutcomes("vx", "baseline", reporttest.Baseline([]string{"vxlan"}, 3, 1))
	c, err := report.Compare([]*report.Report{hg, vx}, report.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Runs[0] != "hg (host-gw)" || c.Runs[1] != "vx (vxlan)" {
		t.Errorf("run labels %v", c.Runs)
	}
	var crossWorse []string
	for _, l := range c.Lines {
		if l.Others[0].Verdict == report.Missing {
			t.Errorf("%s %s missing: rows not matched by connection", l.Connection, l.Metric)
		}
		if l.Others[0].Verdict == report.Regression {
			if l.Connection != suite.PodPodCrossNode {
				t.Errorf("regression on %s %s; only cross-node differs", l.Connection, l.Metric)
			}
			crossWorse = append(crossWorse, l.Metric)
		}
	}
	if len(crossWorse) == 0 {
		t.Error("vxlan's lower cross-node throughput was not flagged")
	}
	var b bytes.Buffer
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "compare.txt", b.Bytes())
	if n := len(c.Charts()); n != 2 {
		t.Errorf("%d comparison charts, want 2", n)
	}
}

func TestShapingConformance(t *testing.T) {
	s := report.Shaping{Name: "x", LimitBps: 10e6, Series: reporttest.Shaped(10e6, 7.7, 5)}
	over, steady, ok := s.Conformance()
	if !ok || math.Abs(over-670) > 0.5 || steady < 95 || steady > 105 {
		t.Errorf("conformance over %.1f %% steady %.1f %% ok %v; want 670 and ~100", over, steady, ok)
	}
	if _, _, ok := (report.Shaping{LimitBps: 0, Series: []probe.Interval{{}}}).Conformance(); ok {
		t.Error("conformance without a limit reported ok")
	}
}

// Rows labelled by the qos-priority and shaping suites become a matrix and
// conformance charts.
func TestAddSuiteCharts(t *testing.T) {
	rows := []suite.Row{
		{Connection: "c", Labels: map[string]string{qospriority.LabelVariant: "fifo", qospriority.LabelMarking: "none"}, Median: map[string]float64{"latency_ms.p99": 11.3}},
		{Connection: "c", Labels: map[string]string{qospriority.LabelVariant: "fifo", qospriority.LabelMarking: "EF"}, Median: map[string]float64{"latency_ms.p99": 11.4}},
		{Connection: "c", Labels: map[string]string{qospriority.LabelVariant: "htb-priority", qospriority.LabelMarking: "EF"}, Median: map[string]float64{"latency_ms.p99": 0.026}},
		{Connection: "s", Labels: map[string]string{shaping.LabelDirection: "egress", shaping.LabelBurst: "32KiB"},
			Median: map[string]float64{"limit_bps": 10e6}, Series: map[string][]float64{"intervals_bps": {10.7e6, 10e6, 9.9e6}}},
	}
	// The charts come from the suites' presentations.
	p := qospriority.Suite{}.Presentation()
	p.Series = shaping.LimitPresentation().Series
	r := &report.Report{RunID: "q", Suite: "qos-priority", Status: "succeeded", Rows: rows, Present: p}
	r.AddSuiteCharts()
	if len(r.Matrices) != 1 {
		t.Fatalf("%d matrices, want 1 (no ping figures)", len(r.Matrices))
	}
	m := r.Matrices[0]
	if strings.Join(m.Rows, ",") != "fifo,htb-priority" || strings.Join(m.Cols, ",") != "none,EF" {
		t.Errorf("matrix rows %v cols %v", m.Rows, m.Cols)
	}
	if !math.IsNaN(m.Values[1][0]) || m.Values[1][1] != 0.026 {
		t.Errorf("matrix values %v", m.Values)
	}
	if len(r.Shaping) != 1 || r.Shaping[0].LimitBps != 10e6 || len(r.Shaping[0].Series) != 3 || r.Shaping[0].Series[2].EndS < 0.29 {
		t.Fatalf("shaping %+v", r.Shaping)
	}
	if r.Shaping[0].Name != "direction egress, burst 32KiB" {
		t.Errorf("shaping name %q", r.Shaping[0].Name)
	}
	// Rows sharing a connection stay apart in the table, named by their labels.
	tb := report.BuildTable(rows, report.TableOptions{Present: p})
	var groups []string
	for i, l := range tb.Lines {
		if tb.First[i] {
			groups = append(groups, l[0])
		}
	}
	if len(groups) != 4 || groups[0] != "c · variant fifo, marking none" {
		t.Errorf("table groups %q", groups)
	}
	ids := map[string]bool{}
	for _, c := range r.Charts() {
		ids[c.ID] = true
	}
	if !ids["matrix-1"] || !ids["shaping-1"] {
		t.Errorf("charts %v lack the matrix or the shaping chart", ids)
	}
}

// TestAddSuiteChartsPerConnection: qos-priority rows of two placements
// (same variants and markings on two connections) get a matrix each and
// verdict notes that name their connection, so no cell hides another.
func TestAddSuiteChartsPerConnection(t *testing.T) {
	row := func(conn, variant, marking, verdict string, p99 float64) suite.Row {
		return suite.Row{Connection: conn, Labels: map[string]string{qospriority.LabelVariant: variant, qospriority.LabelMarking: marking,
			qospriority.LabelVerdict: verdict}, Median: map[string]float64{"latency_ms.p99": p99}}
	}
	rows := []suite.Row{
		row("pod-pod same node", "pod-htb", "none", "same", 12), row("pod-pod same node", "pod-htb", "EF", "same", 0.2),
		row("pod-pod cross node", "pod-htb", "none", "cross", 13), row("pod-pod cross node", "pod-htb", "EF", "cross", 0.3),
	}
	r := &report.Report{RunID: "q", Suite: "qos-priority", Status: "succeeded", Rows: rows, Present: qospriority.Suite{}.Presentation()}
	r.AddSuiteCharts()
	if len(r.Matrices) != 2 || !strings.HasSuffix(r.Matrices[0].Title, "(pod-pod same node)") || r.Matrices[1].Values[0][1] != 0.3 {
		t.Fatalf("matrices %+v", r.Matrices)
	}
	if strings.Join(r.Conclusions, "|") != "pod-htb (pod-pod same node): same|pod-htb (pod-pod cross node): cross" {
		t.Errorf("conclusions %q", r.Conclusions)
	}
}
