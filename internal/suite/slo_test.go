package suite_test

import (
	"math"
	"strings"
	"testing"

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
