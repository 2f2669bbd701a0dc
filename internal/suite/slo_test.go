package suite_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

func TestParseSLOs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"ok", `{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < 2"},{"connection":"pod-pod cross node","expr":"rtt_ms.p99 < 1"},{"expr":"throughput_bps.receiver > 500M"}]}`, ""},
		{"unknown metric", `{"apiVersion":"cnperf/v1","objectives":[{"expr":"latency_p99 < 2"}]}`, `unknown metric "latency_p99"`},
		{"unknown operator", `{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct ~ 2"}]}`, `unknown operator "~"`},
		{"bad value", `{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < lots"}]}`, `value "lots"`},
		{"unknown field", `{"apiVersion":"cnperf/v1","objectives":[{"exp":"loss_pct < 2"}]}`, `unknown field "exp"`},
		{"unknown connection", `{"apiVersion":"cnperf/v1","objectives":[{"connection":"pod-node","expr":"loss_pct < 2"}]}`, `unknown connection "pod-node"`},
		{"version", `{"apiVersion":"v0","objectives":[{"expr":"loss_pct < 2"}]}`, `apiVersion "v0"`},
		{"empty", `{"apiVersion":"cnperf/v1","objectives":[]}`, `no objectives`},
		{"shape", `{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct<2"}]}`, `want METRIC OP VALUE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := suite.ParseSLOs([]byte(tt.in), builtin.Registry())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(objs) != 3 || objs[2].Threshold != 500e6 || objs[1].Op != "<" {
					t.Fatalf("objectives = %+v", objs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	rows := []suite.Row{
		{Connection: suite.PodPodSameNode, Median: map[string]float64{"loss_pct": 0.5, "rtt_ms.p99": 0.05}},
		{Connection: suite.PodPodCrossNode, Median: map[string]float64{"loss_pct": 3, "rtt_ms.p99": 1.5}},
	}
	objs, err := suite.ParseSLOs([]byte(`{"apiVersion":"cnperf/v1","objectives":[{"expr":"loss_pct < 2"},{"connection":"pod-pod cross node","expr":"rtt_ms.p99 <= 1.5"},{"connection":"node-node","expr":"rtt_ms.p99 < 1"}]}`), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	cs := suite.Evaluate(objs, rows)
	if len(cs) != 4 {
		t.Fatalf("%d checks: %+v", len(cs), cs)
	}
	want := []bool{true, false, true, false}
	for i, c := range cs {
		if c.Pass != want[i] {
			t.Errorf("check %d (%s on %s = %v) pass = %v, want %v", i, c.Objective.Expr, c.Connection, c.Value, c.Pass, want[i])
		}
	}
	if !math.IsNaN(cs[3].Value) {
		t.Errorf("objective for a missing row should carry no value: %+v", cs[3])
	}
	if suite.AllPass(cs) {
		t.Error("AllPass with failures")
	}
}

func TestParseSLOsPerClass(t *testing.T) {
	tests := []struct {
		name, objective, wantErr string
	}{
		{"select and stat", `{"select":{"marking":"EF"},"stat":"p95","expr":"latency_ms.p99 <= 1"}`, ""},
		{"relative", `{"select":{"marking":"EF"},"vs":{"marking":"none"},"expr":"latency_ms.p99 <= 0.1 x"}`, ""},
		{"relative without vs", `{"expr":"latency_ms.p99 <= 0.1 x"}`, "give vs"},
		{"vs on an absolute expr", `{"vs":{"marking":"none"},"expr":"latency_ms.p99 <= 1"}`, "write it as METRIC OP FACTOR x"},
		{"unknown stat", `{"stat":"p50","expr":"latency_ms.p99 <= 1"}`, `unknown stat "p50"`},
		{"empty label", `{"select":{"marking":""},"expr":"latency_ms.p99 <= 1"}`, "empty label or value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := suite.ParseSLOs([]byte(`{"apiVersion":"cnperf/v1","objectives":[`+tt.objective+`]}`), builtin.Registry())
			if tt.wantErr == "" {
				if err != nil || len(objs) != 1 {
					t.Fatalf("%v %+v", err, objs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestEvaluatePerClass: rows of a priority test (three repetitions per
// marking), an EF objective that passes where the unmarked rows would
// fail, p95 over repetitions, and a relative objective whose failure
// names the measured ratio.
func TestEvaluatePerClass(t *testing.T) {
	var outs []suite.Outcome
	p99 := map[string][]float64{"EF": {0.20, 0.25, 0.30}, "none": {4.0, 5.0, 9.0}}
	for _, marking := range []string{"EF", "none"} {
		for rep, v := range p99[marking] {
			outs = append(outs, suite.Outcome{
				Step:   suite.Step{Connection: suite.PodPodCrossNode, Repeat: rep, Labels: map[string]string{"variant": "htb-priority", "marking": marking}},
				Result: &probe.Result{Kind: "udp", LatencyMs: &probe.Summary{P99: v}}})
		}
	}
	rows := suite.LabelRows(outs, []string{"variant", "marking"}, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		return map[string]float64{"latency_ms.p99": o.Result.LatencyMs.P99}, nil
	})
	slo := `{"apiVersion":"cnperf/v1","objectives":[
		{"select":{"marking":"EF"},"expr":"latency_ms.p99 <= 1"},
		{"expr":"latency_ms.p99 <= 1"},
		{"select":{"marking":"none"},"stat":"p95","expr":"latency_ms.p99 <= 8"},
		{"select":{"marking":"EF"},"vs":{"marking":"none"},"expr":"latency_ms.p99 <= 0.1 x"},
		{"select":{"marking":"EF"},"vs":{"marking":"none"},"expr":"latency_ms.p99 <= 0.01 x"},
		{"select":{"marking":"AF41"},"expr":"latency_ms.p99 <= 1"}]}`
	objs, err := suite.ParseSLOs([]byte(slo), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	cs := suite.Evaluate(objs, rows)
	type want struct {
		pass bool
		line string
	}
	wants := []want{
		{true, "PASS  latency_ms.p99 <= 1 (pod-pod cross node, marking=EF, variant=htb-priority): 0.25"},
		{true, "marking=EF"},    // unselected: every row, EF passes ...
		{false, "marking=none"}, // ... and the unmarked row fails it
		{false, "FAIL  p95 of latency_ms.p99 <= 8 (pod-pod cross node, marking=none, variant=htb-priority): 9"},
		{true, "ratio 0.05, want <= 0.1"},
		{false, "against 5 (marking=none): ratio 0.05, want <= 0.01"},
		{false, "NO ROWS  latency_ms.p99 <= 1 (marking=AF41): missing (no row matches)"},
	}
	if len(cs) != len(wants) {
		t.Fatalf("%d checks, want %d: %+v", len(cs), len(wants), cs)
	}
	for i, c := range cs {
		t.Logf("%s", c.Line())
		if c.Pass != wants[i].pass || !strings.Contains(c.Line(), wants[i].line) {
			t.Errorf("check %d: %q (pass %v), want pass %v and %q", i, c.Line(), c.Pass, wants[i].pass, wants[i].line)
		}
	}
	if r := cs[5].Ratio; r == nil || math.Abs(*r-0.05) > 1e-9 {
		t.Errorf("ratio = %v, want 0.25/5", r)
	}
}

// TestNoRowsFailOnlyWhenStrict: an objective that selects no row, or a
// relative one with no reference row, checked nothing: "NO ROWS", and the
// run passes, unless the objective or the whole file is strict.
func TestNoRowsFailOnlyWhenStrict(t *testing.T) {
	rows := []suite.Row{{Connection: suite.PodPodCrossNode, Labels: map[string]string{"marking": "EF"}, Median: map[string]float64{"loss_pct": 0}}}
	for _, tc := range []struct {
		name, slo string
		pass      bool
		line      string
	}{
		{"absent class", `{"apiVersion":"cnperf/v1","objectives":[{"select":{"marking":"EF"},"expr":"loss_pct <= 1"},
			{"select":{"marking":"AF41"},"expr":"loss_pct <= 1"}]}`, true, "NO ROWS  loss_pct <= 1 (marking=AF41)"},
		{"absent reference", `{"apiVersion":"cnperf/v1","objectives":[{"connection":"pod-pod cross node","vs":{"connection":"node-node"},"expr":"loss_pct <= 2 x"}]}`,
			true, "NO ROWS  loss_pct <= 2 x (pod-pod cross node, marking=EF): 0 (no reference row"},
		{"strict objective", `{"apiVersion":"cnperf/v1","objectives":[{"select":{"marking":"AF41"},"expr":"loss_pct <= 1","strict":true}]}`,
			false, "FAIL  loss_pct <= 1 (marking=AF41): missing (no row matches)"},
		{"strict file", `{"apiVersion":"cnperf/v1","strict":true,"objectives":[{"select":{"marking":"AF41"},"expr":"loss_pct <= 1"}]}`,
			false, "FAIL  loss_pct <= 1 (marking=AF41)"},
		{"a measured failure still fails", `{"apiVersion":"cnperf/v1","objectives":[{"select":{"marking":"EF"},"expr":"loss_pct < 0"},
			{"select":{"marking":"AF41"},"expr":"loss_pct <= 1"}]}`, false, "FAIL  loss_pct < 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := suite.ParseSLOs([]byte(tc.slo), builtin.Registry())
			if err != nil {
				t.Fatal(err)
			}
			cs := suite.Evaluate(objs, rows)
			var lines []string
			for _, c := range cs {
				lines = append(lines, c.Line())
			}
			if suite.AllPass(cs) != tc.pass || !strings.Contains(strings.Join(lines, "\n"), tc.line) {
				t.Errorf("pass %v, want %v; lines:\n%s\nwant one with %q", suite.AllPass(cs), tc.pass, strings.Join(lines, "\n"), tc.line)
			}
		})
	}
}

// TestExampleSLOFiles: the example profiles in examples/slo parse.
func TestExampleSLOFiles(t *testing.T) {
	files, err := filepath.Glob("../../examples/slo/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example SLO files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := suite.ParseSLOs(data, builtin.Registry()); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
