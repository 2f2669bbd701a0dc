package matrix

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// labelMADs carries k of median ± k·MAD on the steps, so Rows (which sees
// only outcomes) knows it.
const labelMADs = "outlier_mads"

// The figures of a pair row, and which way each is worse.
// Rates and times spread by factors, so their outliers are judged on a
// log scale (a pair at a tenth of the others is as far off as one at ten
// times); loss is judged as it is.
var pairFigures = []struct {
	name, from string
	measure    string
	higherBad  bool
	logScale   bool
	what       string
}{
	{"throughput_bps.receiver", "throughput_bps.receiver", suite.MeasureTCP, false, true, "TCP throughput"},
	{"rtt_ms.p99", "rtt_ms.p99", suite.MeasureRR, true, true, ""},
	{"udp.loss_pct", "loss_pct", suite.MeasureUDP, true, false, "UDP loss"},
	{"rtt_ms.p50", "rtt_ms.p50", suite.MeasureRR, true, true, "RR round trip p50"},
	// The RR p99 is a row figure too, but not judged: a tail on a shared
	// host is too noisy to call a pair slow.
	{"ping.rtt_ms.avg", "rtt_ms.avg", suite.MeasurePing, true, true, "ping round trip"},
}

// Rows implements suite.Suite: a row per ordered pair (in node order),
// outliers labelled with the reason; then a summary row per node. Under
// the sample plan a pair is an outlier only when its re-measure in the
// next cycle confirms it; one that is not confirmed carries the reason
// as LabelSuspect.
func (Suite) Rows(outs []suite.Outcome) []suite.Row {
	k := 3.0
	sample := false
	scanned.Add(int64(len(outs)))
	seen := ""
	for _, o := range outs {
		if s := o.Step.Labels[labelMADs]; s != seen {
			if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
				k, seen = v, s
			}
		}
		sample = sample || o.Step.Labels[labelPlan] == pairplan.PlanSample || o.Step.Labels[labelPlan] == pairplan.PlanZones
	}
	rows := pairRows(outs)
	if !sample {
		flagOutliers(rows, k)
		return append(rows, nodeSummaries(rows)...)
	}
	confirmed, suspect := confirmations(outs, k)
	for i := range rows {
		p := [2]string{rows[i].Labels[LabelSrc], rows[i].Labels[LabelDst]}
		if why := confirmed[p]; why != "" {
			rows[i].Labels[LabelOutlier] = why
		} else if why := suspect[p]; why != "" {
			rows[i].Labels[LabelSuspect] = why
		}
	}
	return append(rows, nodeSummaries(rows)...)
}

// PairFigures are the figures of a pair row that one measurement (tcp,
// udp, rr, ping) gives, by the row's names; the server keeps the same
// as the pair's coverage. It reads the result's fields directly (no
// encoding): a matrix run judges tens of thousands of results a cycle.
func PairFigures(measure string, r *probe.Result) map[string]float64 {
	m := map[string]float64{}
	if r == nil {
		return m
	}
	for _, f := range pairFigures {
		if f.measure != measure {
			continue
		}
		if v, ok := resultFigure(r, f.from); ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			m[f.name] = v
		}
	}
	return m
}

// resultFigure is r's figure by its name in probe.Metrics.
func resultFigure(r *probe.Result, name string) (float64, bool) {
	switch name {
	case "throughput_bps.receiver":
		if r.ThroughputBps != nil {
			return r.ThroughputBps.Receiver, true
		}
	case "loss_pct":
		if r.LossPct != nil {
			return *r.LossPct, true
		}
	case "rtt_ms.p50", "rtt_ms.p99", "rtt_ms.avg":
		if r.RTTms == nil {
			return 0, false
		}
		switch name {
		case "rtt_ms.p50":
			return r.RTTms.P50, true
		case "rtt_ms.p99":
			return r.RTTms.P99, true
		}
		return r.RTTms.Avg, true
	}
	return 0, false
}

// pairRows are a row per ordered pair of outs, in node order.
func pairRows(outs []suite.Outcome) []suite.Row {
	scanned.Add(int64(len(outs)))
	rows := suite.LabelRows(outs, []string{LabelSrc, LabelDst}, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		return PairFigures(o.Step.Measure, o.Result), nil
	})
	slices.SortStableFunc(rows, func(a, b suite.Row) int {
		return strings.Compare(a.Labels[LabelSrc]+"\x00"+a.Labels[LabelDst], b.Labels[LabelSrc]+"\x00"+b.Labels[LabelDst])
	})
	for i := range rows {
		rows[i].Labels[LabelPair] = rows[i].Labels[LabelSrc] + " → " + rows[i].Labels[LabelDst]
	}
	return rows
}

// judge is the outliers among outs' pairs, with their reasons.
func judge(outs []suite.Outcome, k float64) map[[2]string]string {
	rows := pairRows(outs)
	flagOutliers(rows, k)
	out := map[[2]string]string{}
	for _, r := range rows {
		if why := r.Labels[LabelOutlier]; why != "" {
			out[[2]string{r.Labels[LabelSrc], r.Labels[LabelDst]}] = why
		}
	}
	return out
}

func pairOf(o suite.Outcome) [2]string {
	return [2]string{o.Step.Labels[LabelSrc], o.Step.Labels[LabelDst]}
}

// scanned counts the outcomes and rows that Rows and Follow go over, so
// a test can bound their work by the size of what they judge
// (TestRowsAndFollowWorkIsLinear): a schedule of a large cluster judges
// tens of thousands of results a cycle.
var scanned atomic.Int64

// cycleOutcomes are a run's outcomes by cycle: each cycle's own
// measurements (its plan's), and its re-measures by pair.
type cycleOutcomes struct {
	plain map[int][]suite.Outcome
	again map[int]map[[2]string][]suite.Outcome
}

// byCycle sorts outs by cycle in one pass; outcomes without a cycle are
// left out.
func byCycle(outs []suite.Outcome) cycleOutcomes {
	scanned.Add(int64(len(outs)))
	by := cycleOutcomes{plain: map[int][]suite.Outcome{}, again: map[int]map[[2]string][]suite.Outcome{}}
	for _, o := range outs {
		c, err := strconv.Atoi(o.Step.Labels[LabelCycle])
		if err != nil {
			continue
		}
		if o.Step.Labels[LabelConfirm] == "" {
			by.plain[c] = append(by.plain[c], o)
			continue
		}
		if by.again[c] == nil {
			by.again[c] = map[[2]string][]suite.Outcome{}
		}
		by.again[c][pairOf(o)] = append(by.again[c][pairOf(o)], o)
	}
	return by
}

// lastCycle is the last cycle of done, which holds outcomes in the order
// they ran (a cycle's after the one before, as the Runner passes them),
// and that cycle's own measurements; it reads done from the end only as
// far as that cycle goes, so a run of many cycles costs one cycle's work
// a cycle. first is the run's first cycle, the answer when done has no
// later one.
func lastCycle(done []suite.Outcome, first int) (int, []suite.Outcome) {
	last, found := first, false
	var own []suite.Outcome
	i := len(done) - 1
	for ; i >= 0; i-- {
		c, err := strconv.Atoi(done[i].Step.Labels[LabelCycle])
		if err != nil {
			continue
		}
		if !found {
			if c < first {
				break
			}
			last, found = c, true
		}
		if c != last {
			break
		}
		if done[i].Step.Labels[LabelConfirm] == "" {
			own = append(own, done[i])
		}
	}
	scanned.Add(int64(len(done) - 1 - i))
	slices.Reverse(own)
	return last, own
}

// suspectsOf are the pairs a cycle's own measurements make outliers, in
// order.
func suspectsOf(own []suite.Outcome, k float64) [][2]string {
	var ps [][2]string
	for p := range judge(own, k) {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return ps
}

// confirmations judges each cycle's suspects again with their
// re-measures (in the next cycle) in place of their first measurements,
// among the same cycle's other pairs: confirmed when still an outlier.
// Each cycle is judged twice at most, whatever its number of suspects.
func confirmations(outs []suite.Outcome, k float64) (confirmed, suspect map[[2]string]string) {
	confirmed, suspect = map[[2]string]string{}, map[[2]string]string{}
	by := byCycle(outs)
	for _, c := range slices.Sorted(maps.Keys(by.plain)) {
		base := by.plain[c]
		flagged := judge(base, k)
		again := by.again[c+1]
		var swapped []suite.Outcome
		for p := range flagged {
			swapped = append(swapped, again[p]...)
		}
		var rejudged map[[2]string]string
		if len(swapped) > 0 {
			scanned.Add(int64(len(base)))
			for _, o := range base {
				if p := pairOf(o); flagged[p] == "" || len(again[p]) == 0 {
					swapped = append(swapped, o)
				}
			}
			rejudged = judge(swapped, k)
		}
		for p, why := range flagged {
			if len(again[p]) == 0 {
				suspect[p] = why + "; not re-measured"
				continue
			}
			if why2, ok := rejudged[p]; ok {
				confirmed[p] = why2 + "; confirmed by its re-measure"
				delete(suspect, p)
			} else if confirmed[p] == "" {
				suspect[p] = why + "; its re-measure did not confirm it"
			}
		}
	}
	return confirmed, suspect
}

// flagOutliers labels each pair whose figure lies beyond the median ±
// k·MAD of all pairs on its worse side (MAD scaled by 1.4826, the normal
// consistency constant; rates and times on a log scale), and at least
// 25 % below the median (throughput), 50 % above it (round trips) or one
// point above it (loss), so a tight cluster does not flag noise.
func flagOutliers(rows []suite.Row, k float64) {
	for _, f := range pairFigures {
		if f.what == "" {
			continue // a figure of the row, not judged
		}
		tr := func(v float64) float64 { return v }
		if f.logScale {
			tr = func(v float64) float64 { return math.Log(math.Max(v, 1e-12)) }
		}
		var vs, raw []float64
		for _, r := range rows {
			if v, ok := r.Median[f.name]; ok {
				vs, raw = append(vs, tr(v)), append(raw, v)
			}
		}
		if len(vs) < 3 {
			continue
		}
		med, rawMed := suite.Median(vs), suite.Median(raw)
		dev := make([]float64, len(vs))
		for i, v := range vs {
			dev[i] = math.Abs(v - med)
		}
		mad := 1.4826 * suite.Median(dev)
		for i := range rows {
			v, ok := rows[i].Median[f.name]
			if !ok {
				continue
			}
			worse := v < rawMed
			if f.higherBad {
				worse = v > rawMed
			}
			d := math.Abs(tr(v) - med)
			small := math.Abs(v-rawMed) <= 0.25*math.Abs(rawMed)
			if f.higherBad && f.logScale {
				small = v <= 1.5*rawMed // latency: at least half again the median
			}
			if !f.logScale {
				small = math.Abs(v-rawMed) <= 1
			}
			if !worse || d <= k*mad || small {
				continue
			}
			times := ""
			if f.logScale && rawMed > 0 {
				times = fmt.Sprintf(" (%.2gx)", v/rawMed)
			}
			reason := fmt.Sprintf("%s %s is beyond the pairs' median %s%s by more than %g MADs", f.what, format(f.name, v), format(f.name, rawMed), times, k)
			if cur := rows[i].Labels[LabelOutlier]; cur != "" {
				reason = cur + "; " + reason
			}
			rows[i].Labels[LabelOutlier] = reason
		}
	}
}

// format writes a figure with its unit.
func format(name string, v float64) string {
	switch {
	case strings.HasPrefix(name, "throughput"):
		return fmt.Sprintf("%.3g Gbit/s", v/1e9)
	case strings.HasSuffix(name, "loss_pct"):
		return fmt.Sprintf("%.3g %%", v)
	}
	return fmt.Sprintf("%.3g ms", v)
}

// nodeSummaries are a row per node: the median TCP throughput of its
// pairs out and in, its RR round trip out, and the cluster's medians
// beside them; a node is an outlier when at least half its pairs out or
// in are. One pass over the pairs gathers every node's figures.
func nodeSummaries(pairs []suite.Row) []suite.Row {
	scanned.Add(int64(len(pairs)))
	type side struct {
		tput, rtt  []float64
		total, bad int
	}
	type acc struct{ out, in side }
	nodes := map[string]*acc{}
	get := func(n string) *acc {
		a := nodes[n]
		if a == nil {
			a = &acc{}
			nodes[n] = a
		}
		return a
	}
	var tputAll, rttAll []float64
	for _, r := range pairs {
		src, dst := get(r.Labels[LabelSrc]), get(r.Labels[LabelDst])
		bad := r.Labels[LabelOutlier] != ""
		for _, sd := range []*side{&src.out, &dst.in} {
			sd.total++
			if bad {
				sd.bad++
			}
		}
		if v, ok := r.Median["throughput_bps.receiver"]; ok {
			src.out.tput, dst.in.tput, tputAll = append(src.out.tput, v), append(dst.in.tput, v), append(tputAll, v)
		}
		if v, ok := r.Median["rtt_ms.p50"]; ok {
			src.out.rtt, rttAll = append(src.out.rtt, v), append(rttAll, v)
		}
	}
	clusterTput, clusterRTT := suite.Median(tputAll), suite.Median(rttAll)
	out := make([]suite.Row, 0, len(nodes))
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		a := nodes[n]
		row := suite.Row{Connection: "node summary", Labels: map[string]string{LabelNode: n}, Median: map[string]float64{}, Min: map[string]float64{}, Max: map[string]float64{}}
		set := func(name string, v float64, ok bool) {
			if ok {
				row.Median[name], row.Min[name], row.Max[name] = v, v, v
			}
		}
		set("throughput_out_bps", suite.Median(a.out.tput), len(a.out.tput) > 0)
		set("throughput_in_bps", suite.Median(a.in.tput), len(a.in.tput) > 0)
		set("cluster_throughput_bps", clusterTput, len(tputAll) > 0)
		set("rtt_out_ms.p50", suite.Median(a.out.rtt), len(a.out.rtt) > 0)
		set("cluster_rtt_ms.p50", clusterRTT, len(rttAll) > 0)
		var reasons []string
		for _, dir := range []struct {
			name string
			s    side
		}{{"out", a.out}, {"in", a.in}} {
			if dir.s.bad > 0 && 2*dir.s.bad >= dir.s.total {
				reasons = append(reasons, fmt.Sprintf("%d of its %d pairs %s are outliers", dir.s.bad, dir.s.total, dir.name))
			}
		}
		if len(reasons) > 0 {
			row.Labels[LabelOutlier] = strings.Join(reasons, "; ")
		}
		out = append(out, row)
	}
	return out
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{"udp.loss_pct", "ping.rtt_ms.avg", "throughput_out_bps", "throughput_in_bps", "cluster_throughput_bps", "rtt_out_ms.p50", "cluster_rtt_ms.p50"}
}

// Presentation implements suite.Presenter: heat maps (sender ×
// receiver) of throughput, round trip and loss; outliers as notes.
func (Suite) Presentation() suite.Presentation {
	hint := func(title, metric, label string) suite.MatrixHint {
		return suite.MatrixHint{Title: title, Metric: metric, Label: label, RowKey: LabelSrc, RowTitle: "sender node", ColKey: LabelDst, ColTitle: "receiver node"}
	}
	g := func(head, metric string, div float64, format string) suite.Column {
		return suite.Column{Head: head, Metric: metric, Div: div, Format: format}
	}
	pairs := suite.Table{Title: "pairs", Lacks: LabelNode, Columns: []suite.Column{
		{Head: "sender", Label: LabelSrc}, {Head: "receiver", Label: LabelDst},
		g("TCP Gbit/s", "throughput_bps.receiver", 1e9, "%.2f"), g("UDP loss %", "udp.loss_pct", 1, "%.2f"),
		g("RR p50 ms", "rtt_ms.p50", 1, "%.3f"), g("RR p99 ms", "rtt_ms.p99", 1, "%.3f"), g("ping ms", "ping.rtt_ms.avg", 1, "%.3f"),
	}}
	nodes := suite.Table{Title: "nodes", Has: LabelNode, Columns: []suite.Column{
		{Head: "node", Label: LabelNode},
		g("out Gbit/s", "throughput_out_bps", 1e9, "%.2f"), g("in Gbit/s", "throughput_in_bps", 1e9, "%.2f"),
		g("cluster Gbit/s", "cluster_throughput_bps", 1e9, "%.2f"), g("RR out p50 ms", "rtt_out_ms.p50", 1, "%.3f"),
		g("cluster p50 ms", "cluster_rtt_ms.p50", 1, "%.3f"),
	}}
	return suite.Presentation{LabelOrder: []string{LabelSrc, LabelDst, LabelNode}, Conclusion: LabelOutlier, ConclusionOf: LabelPair,
		Tables: []suite.Table{pairs, nodes},
		Matrices: []suite.MatrixHint{
			hint("TCP throughput between nodes", "throughput_bps.receiver", "receiver throughput"),
			hint("RR round trip between nodes (p50)", "rtt_ms.p50", "round trip p50"),
			hint("UDP loss between nodes", "udp.loss_pct", "loss at the set rate"),
		}}
}
