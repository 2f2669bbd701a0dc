package contention

import (
	"math"
	"strconv"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// MeasureFlow is the measure of every step: one of the competing flows.
const MeasureFlow = "flow"

// labelLimit carries the bottleneck's rate (bit/s) on cross-node steps,
// so the rows can say each flow's share of it.
const labelLimit = "limit_bps"

// Figures of the rows.
const (
	FigShareOfBottleneck = "bottleneck_share_pct" // a flow's receiver rate against the bottleneck
	FigShareOfTotal      = "total_share_pct"      // a flow's part of what all flows delivered
	FigFairness          = "fairness_index"       // Jain's index over the flows' receiver rates
	FigTotal             = "total_throughput_bps" // all flows' receiver rates
	FigTotalOfBottleneck = "total_bottleneck_pct" // the total against the bottleneck
	FigBackedOff         = "senders_backed_off"   // 1 when every sender sent at most 10 % more than arrived
)

// caseKey is one phase's flows: a placement, a protocol, a repetition.
type caseKey struct {
	placement, proto string
	rep              int
}

// caseFigures are the figures of one phase's flows together.
type caseFigures struct {
	total, limit    float64
	fairness        float64
	backedOff       bool
	flows, measured int
}

// cases computes, per phase, what its flows did together.
func cases(outs []suite.Outcome) map[caseKey]*caseFigures {
	out := map[caseKey]*caseFigures{}
	sumSq := map[caseKey]float64{}
	for _, o := range outs {
		k := caseKey{o.Step.Labels[LabelPlacement], o.Step.Labels[LabelProto], o.Step.Repeat}
		c := out[k]
		if c == nil {
			c = &caseFigures{backedOff: true}
			if l, err := strconv.ParseFloat(o.Step.Labels[labelLimit], 64); err == nil {
				c.limit = l
			}
			out[k] = c
		}
		c.flows++
		if o.Result == nil || o.Result.ThroughputBps == nil {
			continue
		}
		rx, tx := o.Result.ThroughputBps.Receiver, o.Result.ThroughputBps.Sender
		c.measured++
		c.total += rx
		sumSq[k] += rx * rx
		if tx > 1.1*rx {
			c.backedOff = false
		}
	}
	for k, c := range out {
		if c.measured == c.flows && sumSq[k] > 0 {
			c.fairness = c.total * c.total / (float64(c.flows) * sumSq[k])
		} else {
			c.fairness = math.NaN()
		}
	}
	return out
}

// Rows implements suite.Suite: a row per flow, then a row per case
// (flow "all"), per placement and protocol.
func (Suite) Rows(outs []suite.Outcome) []suite.Row {
	cs := cases(outs)
	keys := []string{LabelPlacement, LabelProto, LabelFlow, LabelBottleneck}
	flows := suite.LabelRows(outs, keys, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		m := map[string]float64{}
		for name, v := range probe.Metrics(o.Result) {
			switch name {
			case "throughput_bps.receiver", "throughput_bps.sender", "loss_pct", "retransmits", "cpu_pct.sender", "cpu_pct.receiver":
				m[name] = v
			}
		}
		c := cs[caseKey{o.Step.Labels[LabelPlacement], o.Step.Labels[LabelProto], o.Step.Repeat}]
		if rx, ok := m["throughput_bps.receiver"]; ok && c != nil {
			if c.limit > 0 {
				m[FigShareOfBottleneck] = 100 * rx / c.limit
			}
			if c.total > 0 {
				m[FigShareOfTotal] = 100 * rx / c.total
			}
		}
		return m, nil
	})
	// One synthetic outcome per case and repetition carries the case's
	// figures through the same aggregation over repetitions.
	var caseOuts []suite.Outcome
	seen := map[caseKey]bool{}
	for _, o := range outs {
		k := caseKey{o.Step.Labels[LabelPlacement], o.Step.Labels[LabelProto], o.Step.Repeat}
		if seen[k] {
			continue
		}
		seen[k] = true
		st := o.Step
		st.Labels = map[string]string{LabelPlacement: k.placement, LabelProto: k.proto, LabelFlow: FlowAll, LabelBottleneck: o.Step.Labels[LabelBottleneck]}
		caseOuts = append(caseOuts, suite.Outcome{Step: st, Result: &probe.Result{Kind: "contention"}})
	}
	all := suite.LabelRows(caseOuts, keys, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		c := cs[caseKey{o.Step.Labels[LabelPlacement], o.Step.Labels[LabelProto], o.Step.Repeat}]
		if c.measured == 0 {
			return nil, nil
		}
		m := map[string]float64{FigTotal: c.total, FigFairness: c.fairness, FigBackedOff: 0}
		if c.backedOff {
			m[FigBackedOff] = 1
		}
		if c.limit > 0 {
			m[FigTotalOfBottleneck] = 100 * c.total / c.limit
		}
		return m, nil
	})
	for i := range all {
		r := &all[i]
		lo, hi := r.Min[FigBackedOff], r.Max[FigBackedOff]
		switch _, ok := r.Median[FigBackedOff]; {
		case !ok:
		case lo == 1:
			r.Labels[LabelBackedOff] = "yes"
		case hi == 0:
			r.Labels[LabelBackedOff] = "no"
		default:
			r.Labels[LabelBackedOff] = "in some repetitions"
		}
	}
	// Each case's flows, then its summary.
	var out []suite.Row
	for _, c := range all {
		for _, f := range flows {
			if f.Labels[LabelPlacement] == c.Labels[LabelPlacement] && f.Labels[LabelProto] == c.Labels[LabelProto] {
				out = append(out, f)
			}
		}
		out = append(out, c)
	}
	return out
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{FigShareOfBottleneck, FigShareOfTotal, FigFairness, FigTotal, FigTotalOfBottleneck, FigBackedOff}
}

// Presentation implements suite.Presenter: per case its flows and, on
// the flow "all", the case's total and fairness.
func (Suite) Presentation() suite.Presentation {
	return suite.Presentation{LabelOrder: []string{LabelPlacement, LabelProto, LabelFlow}, Tables: []suite.Table{{Columns: []suite.Column{
		{Head: "placement", Label: LabelPlacement},
		{Head: "proto", Label: LabelProto},
		{Head: "bottleneck", Label: LabelBottleneck},
		{Head: "flow", Label: LabelFlow},
		{Head: "receiver Mbit/s", Metric: "throughput_bps.receiver", Else: FigTotal, Div: 1e6, Format: "%.1f"},
		{Head: "sender Mbit/s", Metric: "throughput_bps.sender", Div: 1e6, Format: "%.1f"},
		{Head: "loss %", Metric: "loss_pct", Format: "%.2f"},
		{Head: "retransmits", Metric: "retransmits", Format: "%.0f"},
		{Head: "of bottleneck %", Metric: FigShareOfBottleneck, Else: FigTotalOfBottleneck, Format: "%.1f"},
		{Head: "of total %", Metric: FigShareOfTotal, Format: "%.1f"},
		{Head: "fairness", Metric: FigFairness, Format: "%.3f"},
		{Head: "backed off", Label: LabelBackedOff},
	}}}}
}
