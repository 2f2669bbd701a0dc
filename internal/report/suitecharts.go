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
// two labels (qos-priority: variant × marking), the conclusions,
// and one conformance chart per row with a series against a limit
// (shaping, policing: the receiver rate per 100 ms).
//
// When the rows span several connections (qos-priority's two placements),
// each connection gets its own matrices and its conclusions name it, so
// no cell or note of one hides another's.
func (r *Report) AddSuiteCharts() {
	p := r.Present
	for _, h := range p.Matrices {
		conns, byConn := connections(r.Rows, h.RowKey, h.ColKey)
		if len(conns) <= 1 {
			if m, ok := labelMatrix(r.Rows, h); ok {
				r.Matrices = append(r.Matrices, m)
			}
			continue
		}
		for _, c := range conns {
			hc := h
			hc.Title = fmt.Sprintf("%s (%s)", h.Title, c)
			if m, ok := labelMatrix(byConn[c], hc); ok {
				r.Matrices = append(r.Matrices, m)
			}
		}
	}
	if p.Conclusion != "" {
		conns, _ := connections(r.Rows, p.Conclusion)
		seen := map[string]bool{}
		for _, row := range r.Rows {
			of, c := row.Labels[p.ConclusionOf], row.Labels[p.Conclusion]
			if of == "" {
				of = p.RowName(row)
			} else if len(conns) > 1 {
				of = fmt.Sprintf("%s (%s)", of, row.Connection)
			}
			if c != "" && !seen[of+"\x00"+c] {
				seen[of+"\x00"+c] = true
				r.Conclusions = append(r.Conclusions, fmt.Sprintf("%s: %s", of, c))
			}
		}
	}
	if h := p.Series; h != nil {
		for _, row := range r.Rows {
			r.addSeriesChart(row, *h)
		}
	}
}

// connections lists, in order, the connections of the rows that carry
// every label of keys, and those rows by connection.
func connections(rows []suite.Row, keys ...string) ([]string, map[string][]suite.Row) {
	var conns []string
	by := map[string][]suite.Row{}
	for _, row := range rows {
		all := true
		for _, k := range keys {
			all = all && row.Labels[k] != ""
		}
		if !all {
			continue
		}
		if _, ok := by[row.Connection]; !ok {
			conns = append(conns, row.Connection)
		}
		by[row.Connection] = append(by[row.Connection], row)
	}
	return conns, by
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
