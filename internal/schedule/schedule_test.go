package schedule

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

func TestNextDue(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		now   time.Time
		every time.Duration
		want  time.Time
	}{
		{"on time", t0.Add(time.Second), 6 * time.Hour, t0.Add(6 * time.Hour)},
		{"late within one interval", t0.Add(5 * time.Hour), 6 * time.Hour, t0.Add(6 * time.Hour)},
		{"exactly at the next", t0.Add(6 * time.Hour), 6 * time.Hour, t0.Add(12 * time.Hour)},
		{"down for a day: missed ones are not made up", t0.Add(25 * time.Hour), 6 * time.Hour, t0.Add(30 * time.Hour)},
		{"short interval", t0.Add(4500 * time.Millisecond), 2 * time.Second, t0.Add(6 * time.Second)},
	} {
		if got := NextDue(t0, c.every, c.now); !got.Equal(c.want) {
			t.Errorf("%s: next %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPrepareRefusesBadInput(t *testing.T) {
	reg := builtin.Registry()
	ok := api.ScheduleCreate{Suite: "matrix", Every: "6h"}
	for _, c := range []struct {
		name  string
		edit  func(*api.ScheduleCreate)
		field string
		want  string
	}{
		{"no suite", func(s *api.ScheduleCreate) { s.Suite = "" }, "suite", "empty"},
		{"unknown suite", func(s *api.ScheduleCreate) { s.Suite = "nosuch" }, "suite", `unknown suite "nosuch"`},
		{"every not a duration", func(s *api.ScheduleCreate) { s.Every = "daily" }, "every", "want a duration"},
		{"every below the minimum", func(s *api.ScheduleCreate) { s.Every = "30s" }, "every", "at least 1m0s"},
		{"every above the maximum", func(s *api.ScheduleCreate) { s.Every = "1000h" }, "every", "at most 744h0m0s"},
		{"bad time", func(s *api.ScheduleCreate) { s.Time = "long" }, "time", "want a duration"},
		{"negative repeat", func(s *api.ScheduleCreate) { s.Repeat = -1 }, "options", "repeat -1"},
		{"unknown key", func(s *api.ScheduleCreate) { s.Set = map[string]string{"rate": "1G"} }, "set", "unknown setting rate (it takes: endpoints"},
		{"bad value", func(s *api.ScheduleCreate) { s.Set = map[string]string{"udp-rate": "fast"} }, "set", "fast"},
		{"bad slo", func(s *api.ScheduleCreate) {
			s.SLO = json.RawMessage(`{"apiVersion":"cnperf/v1","objectives":[{"expr":"nosuch < 1"}]}`)
		}, "slo", "nosuch"},
	} {
		sc := ok
		c.edit(&sc)
		_, err := Prepare(reg, sc, DefaultMinEvery)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != c.field || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: %v, want a 400 on %s saying %q", c.name, err, c.field, c.want)
		}
	}
	example, err := os.ReadFile("../../examples/slo/matrix.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(reg, api.ScheduleCreate{Suite: "matrix", Every: "6h", SLO: example}, DefaultMinEvery); err != nil {
		t.Errorf("examples/slo/matrix.json (docs/schedules.md): %v", err)
	}
	got, err := Prepare(reg, api.ScheduleCreate{Suite: "matrix", Every: "2s", Time: "300ms", Repeat: 1, Set: map[string]string{"udp-rate": "50M"}}, time.Second)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	o, err := options(got)
	if err != nil || got.Every != 2*time.Second || o.Time != 300*time.Millisecond || o.Repeat != 1 || o.Set["udp-rate"] != "50M" {
		t.Errorf("prepared %+v, options %+v (%v)", got, o, err)
	}
}

func TestSummarize(t *testing.T) {
	rows := []suite.Row{
		{Connection: "n1 → n2", Labels: map[string]string{"src_node": "n1", "dst_node": "n2"}, Median: map[string]float64{"throughput_bps.receiver": 1e9}},
		{Connection: "n2 → n1", Labels: map[string]string{"src_node": "n2", "dst_node": "n1", "outlier": "TCP throughput is low"}, Median: map[string]float64{"throughput_bps.receiver": 1e8}},
		{Connection: "node summary", Labels: map[string]string{"node": "n1"}, Median: map[string]float64{"throughput_out_bps": 1e9}},
	}
	objs, err := suite.ParseSLOs([]byte(`{"apiVersion":"cnperf/v1","objectives":[{"expr":"throughput_bps.receiver >= 500M"}]}`), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	sum := Summarize(rows, suite.Evaluate(objs, rows), true)
	if sum.Pairs != 2 || len(sum.Rows) != 3 || len(sum.Outliers) != 1 || !strings.HasPrefix(sum.Outliers[0], "n2 → n1: ") {
		t.Errorf("summary %+v", sum)
	}
	if v := sum.SLO; v == nil || v.Pass || v.Checks != 2 || v.Failed != 1 || len(v.Failures) != 1 {
		t.Errorf("verdict %+v, want 1 of 2 failed", v)
	}
	if s := Summarize(rows, nil, false); s.SLO != nil {
		t.Errorf("no SLO: verdict %+v, want none", s.SLO)
	}
}
