package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// AddSuiteCharts derives the charts suites describe through their rows'
// labels and series: a qos-priority matrix (variant × marking) of the
// foreground's one-way delay p99 and of ping's round trip, and one
// conformance chart per shaped or policed flow (its receiver rate per
// 100 ms against its limit). Rows without such labels add nothing.
func (r *Report) AddSuiteCharts() {
	for _, spec := range []struct{ metric, label string }{
		{"latency_ms.p99", "foreground one-way delay p99"},
		{"rtt_ms.avg", "ping round trip avg"},
	} {
		if m, ok := qosMatrix(r.Rows, spec.metric, spec.label); ok {
			r.Matrices = append(r.Matrices, m)
		}
	}
	seen := map[string]bool{}
	for _, row := range r.Rows {
		v, verdict := row.Labels[qospriority.LabelVariant], row.Labels[qospriority.LabelVerdict]
		if verdict != "" && !seen[v+verdict] {
			seen[v+verdict] = true
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s", v, verdict))
		}
	}
	for _, row := range r.Rows {
		ser, ok := row.Series["intervals_bps"]
		limit := row.Median["limit_bps"]
		if !ok || len(ser) == 0 || limit <= 0 {
			continue
		}
		var parts []string
		for _, k := range []string{shaping.LabelDirection, shaping.LabelProto, shaping.LabelLoad, shaping.LabelBurst} {
			if v := row.Labels[k]; v != "" {
				parts = append(parts, k+" "+v)
			}
		}
		s := Shaping{Name: strings.Join(parts, ", "), LimitBps: limit}
		if s.Name == "" {
			s.Name = row.Connection
		}
		shapingIntervalS := shaping.Interval.Seconds()
		for i, v := range ser {
			if math.IsNaN(v) {
				continue
			}
			s.Series = append(s.Series, probe.Interval{StartS: float64(i) * shapingIntervalS, EndS: float64(i+1) * shapingIntervalS,
				Bytes: v * shapingIntervalS / 8, ThroughputBps: v})
		}
		r.Shaping = append(r.Shaping, s)
	}
}

// qosMatrix lays rows labelled with a variant and a marking out as a grid.
func qosMatrix(rows []suite.Row, metric, label string) (Matrix, bool) {
	var variants, markings []string
	seenV, seenM := map[string]bool{}, map[string]bool{}
	vals := map[[2]string]float64{}
	for _, row := range rows {
		v, m := row.Labels[qospriority.LabelVariant], row.Labels[qospriority.LabelMarking]
		x, ok := row.Median[metric]
		if v == "" || m == "" || !ok {
			continue
		}
		if !seenV[v] {
			seenV[v] = true
			variants = append(variants, v)
		}
		if !seenM[m] {
			seenM[m] = true
			markings = append(markings, m)
		}
		vals[[2]string{v, m}] = x
	}
	if len(vals) == 0 {
		return Matrix{}, false
	}
	mx := Matrix{Title: fmt.Sprintf("qos-priority: %s by variant and marking", label), Metric: metric, Label: label,
		RowLabel: "variant (where the queue is)", ColLabel: "foreground marking", Rows: variants, Cols: markings}
	for _, v := range variants {
		line := make([]float64, len(markings))
		for j, m := range markings {
			line[j] = math.NaN()
			if x, ok := vals[[2]string{v, m}]; ok {
				line[j] = x
			}
		}
		mx.Values = append(mx.Values, line)
	}
	return mx, true
}
