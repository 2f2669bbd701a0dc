package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// AddSuiteCharts derives the charts the suite's presentation (r.Present)
// asks for from its rows' labels and series: matrices of one figure over
// two labels (qos-priority: variant × marking), the conclusions as notes,
// and one conformance chart per row with a series against a limit
// (shaping, policing: the receiver rate per 100 ms).
func (r *Report) AddSuiteCharts() {
	p := r.Present
	for _, h := range p.Matrices {
		if m, ok := labelMatrix(r.Rows, h); ok {
			r.Matrices = append(r.Matrices, m)
		}
	}
	if p.Conclusion != "" {
		seen := map[string]bool{}
		for _, row := range r.Rows {
			of, c := row.Labels[p.ConclusionOf], row.Labels[p.Conclusion]
			if c != "" && !seen[of+c] {
				seen[of+c] = true
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %s", of, c))
			}
		}
	}
	if h := p.Series; h != nil {
		for _, row := range r.Rows {
			r.addSeriesChart(row, *h)
		}
	}
}

// addSeriesChart adds the row's series against its limit, if it has both.
func (r *Report) addSeriesChart(row suite.Row, h suite.SeriesHint) {
	ser, ok := row.Series[h.Series]
	limit := row.Median[h.Limit]
	if !ok || len(ser) == 0 || limit <= 0 {
		return
	}
	var parts []string
	for _, k := range h.NameLabels {
		if v := row.Labels[k]; v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	s := Shaping{Name: strings.Join(parts, ", "), LimitBps: limit}
	if s.Name == "" {
		s.Name = row.Connection
	}
	step := h.Interval.Seconds()
	for i, v := range ser {
		if math.IsNaN(v) {
			continue
		}
		s.Series = append(s.Series, probe.Interval{StartS: float64(i) * step, EndS: float64(i+1) * step, Bytes: v * step / 8, ThroughputBps: v})
	}
	r.Shaping = append(r.Shaping, s)
}

// labelMatrix lays rows labelled with both keys of h out as a grid.
func labelMatrix(rows []suite.Row, h suite.MatrixHint) (Matrix, bool) {
	var rowVals, colVals []string
	seenR, seenC := map[string]bool{}, map[string]bool{}
	vals := map[[2]string]float64{}
	for _, row := range rows {
		a, b := row.Labels[h.RowKey], row.Labels[h.ColKey]
		x, ok := row.Median[h.Metric]
		if a == "" || b == "" || !ok {
			continue
		}
		if !seenR[a] {
			seenR[a] = true
			rowVals = append(rowVals, a)
		}
		if !seenC[b] {
			seenC[b] = true
			colVals = append(colVals, b)
		}
		vals[[2]string{a, b}] = x
	}
	if len(vals) == 0 {
		return Matrix{}, false
	}
	mx := Matrix{Title: h.Title, Metric: h.Metric, Label: h.Label, RowLabel: h.RowTitle, ColLabel: h.ColTitle, Rows: rowVals, Cols: colVals}
	for _, a := range rowVals {
		line := make([]float64, len(colVals))
		for j, b := range colVals {
			line[j] = math.NaN()
			if x, ok := vals[[2]string{a, b}]; ok {
				line[j] = x
			}
		}
		mx.Values = append(mx.Values, line)
	}
	return mx, true
}
