package netpol

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"

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
	// Enforcement latency over the samples: from asking for a deny (an
	// allow) to the first connect it changed.
	FigDenyP50  = "deny_latency_p50_ms"
	FigDenyP99  = "deny_latency_p99_ms"
	FigAllowP50 = "allow_latency_p50_ms"
	FigAllowP99 = "allow_latency_p99_ms"
	// Removal latency: from asking to remove the deny after the phase to
	// the environment's undo returning, which on a cluster is once a new
	// connection of the pair is allowed again (a check about every
	// second: an upper bound), in the lab once its rules are gone.
	FigRemovalP50 = "removal_latency_p50_ms"
	FigRemovalP99 = "removal_latency_p99_ms"
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
	var cost, deny, enforce []suite.Outcome
	for _, o := range outs {
		switch o.Step.Labels[LabelPolicies] {
		case PoliciesDeny:
			deny = append(deny, o)
		case PoliciesEnforce:
			enforce = append(enforce, o)
		default:
			cost = append(cost, o)
		}
	}
	rows := costRows(cost)
	if len(deny) > 0 {
		rows = append(rows, denyRow(deny))
	}
	if len(enforce) > 0 {
		rows = append(rows, enforceRow(enforce))
	}
	return rows
}

// enforceRow gives the enforcement latencies' p50 and p99 over the
// samples (nearest rank: with few samples p99 is the largest), and why
// any sample measured none.
func enforceRow(outs []suite.Outcome) suite.Row {
	r := suite.Row{Connection: outs[0].Step.Connection, Backend: outs[0].Step.Backend,
		Src: suite.EndpointLabel(outs[0].Step.Src), Dst: suite.EndpointLabel(outs[0].Step.Dst),
		Labels: map[string]string{LabelPolicies: PoliciesEnforce, LabelSelect: SelectPair},
		Median: map[string]float64{}, Min: map[string]float64{}, Max: map[string]float64{}}
	var deny, allow, removal []float64
	for i, o := range outs {
		d, a, err := Enforcement(o)
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("sample %d: %v", i+1, err))
		}
		if d >= 0 {
			deny = append(deny, float64(d)/1e6)
		}
		if a >= 0 {
			allow = append(allow, float64(a)/1e6)
		}
		if rm := Removal(o); rm >= 0 {
			removal = append(removal, float64(rm)/1e6)
		}
	}
	r.Repetitions = len(outs)
	for _, f := range []struct {
		vs       []float64
		p50, p99 string
	}{{deny, FigDenyP50, FigDenyP99}, {allow, FigAllowP50, FigAllowP99}, {removal, FigRemovalP50, FigRemovalP99}} {
		if len(f.vs) == 0 {
			continue
		}
		slices.Sort(f.vs)
		r.Median[f.p50], r.Median[f.p99] = stats.Percentile(f.vs, 50), stats.Percentile(f.vs, 99)
		r.Min[f.p50], r.Max[f.p50] = f.vs[0], f.vs[len(f.vs)-1]
	}
	return r
}

// Enforcement reads an enforcement sample: the time from asking for the
// deny to the first connect it failed, and from asking for the allow to
// the first that succeeded again; -1 for one not measured, with the
// reason in err.
func Enforcement(o suite.Outcome) (deny, allow time.Duration, err error) {
	deny, allow = -1, -1
	if o.Err != "" || o.Result == nil || o.Result.Connects == nil {
		return deny, allow, fmt.Errorf("no connect timeline: %s", o.Err)
	}
	tl := o.Result.Connects
	var denyAt, allowAt time.Time
	for _, m := range o.Made {
		switch {
		case m.Change.Policy == nil:
		case m.Change.Policy.Deny:
			denyAt = m.Asked
		case m.Change.Policy.Selecting > 0:
			allowAt = m.Asked
		}
	}
	if len(o.Made) == 0 {
		return deny, allow, errors.New("the run does not say when the deny and the allow were made (a run read back from the server does not; the report of the suite run itself does)")
	}
	if denyAt.IsZero() {
		return deny, allow, errors.New("the deny was not made while the sampler ran")
	}
	if last := tl.LastBefore(denyAt); last != probe.ConnectOK {
		return deny, allow, fmt.Errorf("no connect succeeded right before the deny (last: %q): the sampler started late or the path failed", last)
	}
	at, ok := tl.FirstAfter(denyAt, false)
	if !ok {
		return deny, allow, errors.New("no connect failed after the deny: it was not enforced while the sampler ran")
	}
	deny = at.Sub(denyAt)
	if allowAt.IsZero() {
		return deny, allow, errors.New("the allow was not made while the sampler ran")
	}
	if tl.LastBefore(allowAt) == probe.ConnectOK {
		return deny, allow, errors.New("connects succeeded again before the allow was made")
	}
	if at, ok = tl.FirstAfter(allowAt, true); !ok {
		return deny, allow, errors.New("no connect succeeded after the allow: it was not enforced while the sampler ran")
	}
	return deny, at.Sub(allowAt), nil
}

// Removal reads how long the removal of a sample's deny took, from the
// Runner asking for it to the environment's undo returning; -1 when the
// run does not say (a run read back from before removals were timed).
func Removal(o suite.Outcome) time.Duration {
	for _, m := range o.Made {
		if m.Change.Policy != nil && m.Change.Policy.Deny && !m.Undone.IsZero() && !m.Removed.IsZero() {
			return m.Removed.Sub(m.Undone)
		}
	}
	return -1
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
	return []string{FigThroughput, FigRR, FigCRR, FigThroughputVsNone, FigRRVsNone, FigCRRVsNone, FigDenyP50, FigDenyP99, FigAllowP50, FigAllowP99,
		FigRemovalP50, FigRemovalP99}
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
		{Head: "deny ms p50", Metric: FigDenyP50, Format: "%.1f", Optional: true},
		{Head: "p99", Metric: FigDenyP99, Format: "%.1f", Optional: true},
		{Head: "allow ms p50", Metric: FigAllowP50, Format: "%.1f", Optional: true},
		{Head: "p99", Metric: FigAllowP99, Format: "%.1f", Optional: true},
		{Head: "removal ms p50", Metric: FigRemovalP50, Format: "%.0f", Optional: true},
		{Head: "p99", Metric: FigRemovalP99, Format: "%.0f", Optional: true},
	}}}}
}
