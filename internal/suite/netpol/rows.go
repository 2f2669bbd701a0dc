package netpol

import (
	"fmt"
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

// Labels of the deny row.
const (
	LabelEstablished = "established" // "kept" or "cut", in how many repetitions
	LabelNew         = "new"         // "refused" or "allowed"
)

// Rows implements suite.Suite: a row per number of policies and variant,
// the no-policy row first, each figure also against it; then the deny
// row: whether the held connection was kept and new ones refused.
func (Suite) Rows(outs []suite.Outcome) []suite.Row {
	var cost, deny []suite.Outcome
	for _, o := range outs {
		if o.Step.Labels[LabelPolicies] == PoliciesDeny {
			deny = append(deny, o)
		} else {
			cost = append(cost, o)
		}
	}
	rows := costRows(cost)
	if len(deny) > 0 {
		rows = append(rows, denyRow(deny))
	}
	return rows
}

// denyRow says, over the repetitions, whether the connection held
// through the deny kept transacting and whether new ones were refused.
func denyRow(outs []suite.Outcome) suite.Row {
	r := suite.Row{Connection: outs[0].Step.Connection, Backend: outs[0].Step.Backend,
		Src: suite.EndpointLabel(outs[0].Step.Src), Dst: suite.EndpointLabel(outs[0].Step.Dst),
		Labels: map[string]string{LabelPolicies: PoliciesDeny, LabelSelect: SelectPair}, Median: map[string]float64{}}
	var kept, cut, refused, allowed int
	reps := map[int]bool{}
	for _, o := range outs {
		reps[o.Step.Repeat] = true
		ok := o.Err == "" && o.Result != nil
		switch o.Step.Measure {
		case MeasureHeld:
			if ok {
				kept++
			} else {
				cut++
				r.Errors = append(r.Errors, fmt.Sprintf("held #%d: %s", o.Step.Repeat+1, o.Err))
			}
		case MeasureNew:
			if ok {
				allowed++
			} else {
				refused++
			}
		}
	}
	r.Repetitions = len(reps)
	word := func(a, b int, wa, wb string) string {
		switch {
		case a+b == 0:
			return "not measured"
		case b == 0:
			return wa
		case a == 0:
			return wb
		}
		return fmt.Sprintf("%s in %d of %d", wa, a, a+b)
	}
	r.Labels[LabelEstablished] = word(kept, cut, "kept", "cut")
	r.Labels[LabelNew] = word(refused, allowed, "refused", "allowed")
	return r
}

// costRows are the rows of the cost phases.
func costRows(outs []suite.Outcome) []suite.Row {
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
		{Head: "established", Label: LabelEstablished, Optional: true},
		{Head: "new", Label: LabelNew, Optional: true},
	}}}}
}
