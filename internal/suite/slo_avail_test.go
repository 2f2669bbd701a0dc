package suite

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

func TestParseAvailabilityObjectives(t *testing.T) {
	for _, c := range []struct {
		expr, conn string
		want       string // "" parses
		window     time.Duration
		threshold  float64
	}{
		{expr: "success >= 99.9 % over 1h", window: time.Hour, threshold: 99.9},
		{expr: "success > 99% over 24h", conn: PodPodCrossNode, window: 24 * time.Hour, threshold: 99},
		{expr: "success >= 99.9 % over", want: `reads "success >= 99.9 % over 1h"`},
		{expr: "success >= 99.9 over 1h", want: `reads "success >= 99.9 % over 1h"`},
		{expr: "success >= 120 % over 1h", want: "percentage 0-100"},
		{expr: "success >= 99 % over 10s", want: "from 1m to 744h"},
		{expr: "success => 99 % over 1h", want: `unknown operator "=>"`},
	} {
		objs, err := ParseSLOs([]byte(`{"apiVersion": "cnperf/v1", "objectives": [{"connection": "`+c.conn+`", "expr": "`+c.expr+`"}]}`), nil)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: err %v, want %q", c.expr, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if o := objs[0]; !o.Availability || o.Window != c.window || o.Threshold != c.threshold || o.Metric != MetricSuccess {
			t.Errorf("%q: %+v", c.expr, o)
		}
	}
	_, err := ParseSLOs([]byte(`{"apiVersion": "cnperf/v1", "objectives": [{"select": {"marking": "EF"}, "expr": "success >= 99 % over 1h"}]}`), nil)
	if err == nil || !strings.Contains(err.Error(), "takes no select") {
		t.Errorf("availability with select: %v", err)
	}
}

// TestEvaluateAvailability: pass and fail on the mesh's counts, and a
// failure (never a silent pass) without rounds, with too little of the
// window covered, without a source, or when the source fails; row
// objectives are left to Evaluate, which in turn skips these.
func TestEvaluateAvailability(t *testing.T) {
	objs, err := ParseSLOs([]byte(`{"apiVersion": "cnperf/v1", "objectives": [{"expr": "success >= 99.9 % over 1h"}, {"expr": "loss_pct < 1"}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	full := probe.Duration(time.Hour)
	for _, c := range []struct {
		name   string
		a      MeshAvailability
		err    error
		pass   bool
		detail string
	}{
		{"pass", MeshAvailability{Covered: full, Rounds: 60, Probes: 360, Sent: 1800, Received: 1799}, nil, true, "1799 of 1800 echo requests answered in 60 rounds"},
		{"fail", MeshAvailability{Covered: full, Rounds: 60, Probes: 360, Failed: 2, Sent: 1800, Received: 1790}, nil, false, "1790 of 1800"},
		{"no rounds", MeshAvailability{}, nil, false, "no ping-mesh round in the last 1h0m0s"},
		{"short coverage", MeshAvailability{Covered: probe.Duration(10 * time.Minute), Rounds: 10, Probes: 60, Sent: 300, Received: 300}, nil, false, "cover only 10m0s of the 1h0m0s window"},
		{"source fails", MeshAvailability{}, errors.New("list the mesh's rounds: 401"), false, "401"},
	} {
		src := func(w time.Duration, conn string) (MeshAvailability, error) {
			if w != time.Hour || conn != "" {
				t.Errorf("%s: asked for %v %q", c.name, w, conn)
			}
			return c.a, c.err
		}
		checks := EvaluateAvailability(objs, src)
		if len(checks) != 1 || checks[0].Pass != c.pass || !strings.Contains(checks[0].Line(), c.detail) {
			t.Errorf("%s: %+v", c.name, checks)
			continue
		}
		t.Logf("%s: %s", c.name, checks[0].Line())
		if c.name == "pass" && math.Abs(checks[0].Value-100*1799.0/1800) > 1e-9 {
			t.Errorf("value %v", checks[0].Value)
		}
	}
	if cs := EvaluateAvailability(objs, nil); len(cs) != 1 || cs[0].Pass || !strings.Contains(cs[0].Detail, "no server") {
		t.Errorf("without a source: %+v", cs)
	}
	rows := []Row{{Connection: PodPodCrossNode, Median: map[string]float64{"loss_pct": 0.5}}}
	if cs := Evaluate(objs, rows); len(cs) != 1 || cs[0].Objective.Metric != "loss_pct" || !cs[0].Pass {
		t.Errorf("Evaluate: %+v", cs)
	}
	if err := OnlyAvailability(objs); err == nil || !strings.Contains(err.Error(), "objective 2 (loss_pct < 1)") {
		t.Errorf("OnlyAvailability: %v", err)
	}
}
