package netpol

import (
	"math"

	"github.com/cnperf/cnperf/internal/suite"
)

// Figures of the rows.
const (
	FigThroughput = "throughput_bps.receiver"
	FigRR         = "rr_per_s"
	FigCRR        = "crr_per_s"
	// Each against the row with no policy, in percent (100: no cost).
	FigThroughputVsNone = "throughput_vs_none_pct"
	FigRRVsNone         = "rr_vs_none_pct"
	FigCRRVsNone        = "crr_vs_none_pct"
)

func figures(o suite.Outcome) (map[string]float64, map[string][]float64) {
	m := map[string]float64{}
	r := o.Result
	switch o.Step.Measure {
	case MeasureTCP:
		if r.ThroughputBps != nil {
			m[FigThroughput] = r.ThroughputBps.Receiver
		}
	case MeasureRR:
		if r.TransactionsPerS != nil {
			m[FigRR] = *r.TransactionsPerS
		}
	case MeasureCRR:
		if r.TransactionsPerS != nil {
			m[FigCRR] = *r.TransactionsPerS
		}
	}
	return m, nil
}

// Rows implements suite.Suite: a row per number of policies and variant,
// the no-policy row first, each figure also against it.
func (Suite) Rows(outs []suite.Outcome) []suite.Row {
	rows := suite.LabelRows(outs, []string{LabelPolicies, LabelSelect}, figures)
	var none *suite.Row
	for i := range rows {
		if rows[i].Labels[LabelPolicies] == "0" {
			none = &rows[i]
		}
	}
	if none == nil {
		return rows
	}
	base := map[string]float64{}
	for k, v := range none.Median {
		base[k] = v
	}
	for i := range rows {
		for fig, vs := range map[string]string{FigThroughput: FigThroughputVsNone, FigRR: FigRRVsNone, FigCRR: FigCRRVsNone} {
			v, ok1 := rows[i].Median[fig]
			b, ok2 := base[fig]
			if ok1 && ok2 && b > 0 && !math.IsNaN(v) {
				rows[i].Median[vs] = 100 * v / b
			}
		}
	}
	return rows
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{FigThroughput, FigRR, FigCRR, FigThroughputVsNone, FigRRVsNone, FigCRRVsNone}
}

// Presentation implements suite.Presenter.
func (Suite) Presentation() suite.Presentation {
	return suite.Presentation{LabelOrder: []string{LabelPolicies, LabelSelect}, Tables: []suite.Table{{Columns: []suite.Column{
		{Head: "policies", Label: LabelPolicies},
		{Head: "select", Label: LabelSelect},
		{Head: "TCP Mbit/s", Metric: FigThroughput, Div: 1e6, Format: "%.0f", Spread: true},
		{Head: "vs none %", Metric: FigThroughputVsNone, Format: "%.1f"},
		{Head: "rr/s", Metric: FigRR, Format: "%.0f", Spread: true},
		{Head: "vs none %", Metric: FigRRVsNone, Format: "%.1f"},
		{Head: "crr/s", Metric: FigCRR, Format: "%.0f", Spread: true},
		{Head: "vs none %", Metric: FigCRRVsNone, Format: "%.1f"},
	}}}}
}
