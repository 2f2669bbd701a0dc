package responsiveness

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Figures of the rows.
const (
	FigIdleP50       = "idle.rtt_ms.p50"
	FigIdleP99       = "idle.rtt_ms.p99"
	FigLoadedP50     = "loaded.rtt_ms.p50"
	FigLoadedP99     = "loaded.rtt_ms.p99"
	FigLoadedLoss    = "loaded.rr_loss_pct"
	FigRiseP50       = "rise_ms.p50" // loaded p50 less idle p50
	FigRiseP99       = "rise_ms.p99"
	FigRPMIdle       = "rpm.idle" // 60,000 over the trimmed mean round trip in ms
	FigRPMLoaded     = "rpm.loaded"
	FigOWDIdle       = "idle.owd_ms.p50" // UDP one-way delay
	FigOWDLoaded     = "loaded.owd_ms.p50"
	FigForward       = "forward_bps" // the forward streams' receiver rate
	FigBack          = "back_bps"
	FigRetransmits   = "retransmits"              // both ways' streams
	FigExpected      = "expected_queue_delay_ms"  // the bottleneck's median backlog at its rate (see bottleneck.verdict)
	FigFullDelay     = "full_queue_delay_ms"      // the bottleneck's limit over its rate
	FigFill          = "queue_fill_pct"           // its mean backlog over its limit
	FigRiseOfExpect  = "rise_of_expected_pct"     // the p50 rise against FigExpected
	FigRiseOfFull    = "rise_of_full_pct"         // the p50 rise against FigFullDelay
	FigSenderBacklog = "sender.backlog_bytes"     // the sending node's busiest qdisc, mean
	FigSenderP50     = "sender.backlog_p50_bytes" // and median
	FigSenderDelay   = "sender.queue_delay_ms"    // the mean at the bottleneck's rate, or else the forward streams'
	FigSenderDrops   = "sender.qdisc_drops"
	FigRecvBacklog   = "receiver.backlog_bytes"
	FigRecvP50       = "receiver.backlog_p50_bytes"
	FigRecvDelay     = "receiver.queue_delay_ms" // at the back streams' rate
	FigRecvDrops     = "receiver.qdisc_drops"
	FigSqueezed      = "softnet_squeezed" // the receive softirq out of budget, both watches
)

// Texts of the rows: the link of each node whose qdisc held the most.
const (
	TextSenderLink = "sender.link"
	TextRecvLink   = "receiver.link"
)

// ExpectTolerancePct is how close the loaded p50's rise must come to the
// bottleneck queue's delay for the verdict to say it matches.
const ExpectTolerancePct = 20.0

// busiest returns the link whose root qdisc held the largest mean backlog.
func busiest(w *probe.QueueWatch) (probe.LinkQueue, bool) {
	if w == nil || len(w.Links) == 0 {
		return probe.LinkQueue{}, false
	}
	best := w.Links[0]
	for _, l := range w.Links[1:] {
		if l.MeanBacklogBytes > best.MeanBacklogBytes {
			best = l
		}
	}
	return best, true
}

// figures is what one outcome adds to its repetition's figures.
func figures(o suite.Outcome) (map[string]float64, map[string][]float64) {
	m := map[string]float64{}
	r := o.Result
	load := o.Step.Labels[LabelLoad]
	switch o.Step.Measure {
	case MeasureRR:
		if r.RTTms != nil && r.RTTms.Count > 0 {
			m[load+".rtt_ms.p50"], m[load+".rtt_ms.p99"] = r.RTTms.P50, r.RTTms.P99
		}
		if r.RTTTrimmedMs != nil && *r.RTTTrimmedMs > 0 {
			m["rpm."+load] = 60000 / *r.RTTTrimmedMs
		}
		if r.LossPct != nil && load == LoadLoaded {
			m[FigLoadedLoss] = *r.LossPct
		}
	case MeasureUDP:
		if r.LatencyMs != nil && r.LatencyMs.Count > 0 {
			m[load+".owd_ms.p50"] = r.LatencyMs.P50
		}
	case MeasureStream:
		if r.ThroughputBps != nil {
			name := FigForward
			if o.Step.Labels[LabelDir] == DirBack {
				name = FigBack
			}
			m[name] = r.ThroughputBps.Receiver
		}
		if r.Retransmits != nil {
			m[FigRetransmits] = float64(*r.Retransmits)
		}
	case MeasureQueue:
		prefix := o.Step.Labels[LabelAt] + "."
		if l, ok := busiest(r.Queue); ok {
			m[prefix+"backlog_bytes"] = l.MeanBacklogBytes
			if l.P50BacklogBytes != nil {
				m[prefix+"backlog_p50_bytes"] = *l.P50BacklogBytes
			}
		}
		if r.Queue != nil {
			var drops uint64
			for _, l := range r.Queue.Links {
				drops += l.Drops
			}
			m[prefix+"qdisc_drops"] = float64(drops)
			if r.Queue.SoftnetSqueezed != nil {
				m[FigSqueezed] = float64(*r.Queue.SoftnetSqueezed)
			}
		}
	}
	return m, nil
}

// Rows implements suite.Suite: a row per path, in suite.ConnectionOrder.
func (Suite) Rows(outs []suite.Outcome) []suite.Row {
	var paths []string
	for _, o := range outs {
		if !slices.Contains(paths, o.Step.Connection) {
			paths = append(paths, o.Step.Connection)
		}
	}
	rank := func(p string) int {
		if i := slices.Index(suite.ConnectionOrder, p); i >= 0 {
			return i
		}
		return len(suite.ConnectionOrder)
	}
	slices.SortStableFunc(paths, func(a, b string) int { return rank(a) - rank(b) })
	var rows []suite.Row
	for _, p := range paths {
		var mine []suite.Outcome
		for _, o := range outs {
			if o.Step.Connection == p {
				mine = append(mine, o)
			}
		}
		// The figures of the two summed measures (retransmits, squeezes)
		// come from two outcomes each; sum them per repetition first.
		for _, r := range suite.LabelRows(sumPerRepeat(mine), []string{LabelBottleneck}, figures) {
			// The row is the path's: its pair is the rr probe's.
			for _, o := range mine {
				if o.Step.Measure == MeasureRR {
					r.Src, r.Dst = suite.EndpointLabel(o.Step.Src), suite.EndpointLabel(o.Step.Dst)
					break
				}
			}
			finish(&r, mine)
			rows = append(rows, r)
		}
	}
	return rows
}

// sumPerRepeat returns outs with the retransmits of a repetition's two
// streams and the squeezes of its two watches summed into the first of
// each (LabelRows keeps one value per figure and repetition).
func sumPerRepeat(outs []suite.Outcome) []suite.Outcome {
	type key struct {
		measure string
		rep     int
	}
	first := map[key]int{}
	out := make([]suite.Outcome, len(outs))
	copy(out, outs)
	for i, o := range out {
		if o.Result == nil || (o.Step.Measure != MeasureStream && o.Step.Measure != MeasureQueue) {
			continue
		}
		k := key{o.Step.Measure, o.Step.Repeat}
		j, seen := first[k]
		if !seen {
			first[k] = i
			r := *o.Result
			if r.Retransmits != nil {
				r.Retransmits = probe.Int64(*r.Retransmits)
			}
			if r.Queue != nil {
				q := *r.Queue
				if q.SoftnetSqueezed != nil {
					q.SoftnetSqueezed = probe.Int64(*q.SoftnetSqueezed)
				}
				r.Queue = &q
			}
			out[i].Result = &r
			continue
		}
		f := out[j].Result
		if o.Result.Retransmits != nil && f.Retransmits != nil {
			*f.Retransmits += *o.Result.Retransmits
		}
		if o.Result.Queue != nil && f.Queue != nil && o.Result.Queue.SoftnetSqueezed != nil && f.Queue.SoftnetSqueezed != nil {
			// The host's counter: both watches on one machine (the lab)
			// read the same one, so the larger, not the sum.
			*f.Queue.SoftnetSqueezed = max(*f.Queue.SoftnetSqueezed, *o.Result.Queue.SoftnetSqueezed)
		}
		// Its own figures stay (throughput, backlog) but not the summed ones.
		r := *o.Result
		r.Retransmits = nil
		if r.Queue != nil {
			q := *r.Queue
			q.SoftnetSqueezed = nil
			r.Queue = &q
		}
		out[i].Result = &r
	}
	return out
}

// finish adds to a path's row what needs figures of several measures: the
// rises, the queues' delays, the expected delay and the verdict.
func finish(r *suite.Row, outs []suite.Outcome) {
	med := func(name string) (float64, bool) {
		v, ok := r.Median[name]
		return v, ok && !math.IsNaN(v)
	}
	idle, okI := med(FigIdleP50)
	loaded, okL := med(FigLoadedP50)
	if okI && okL {
		r.Median[FigRiseP50] = loaded - idle
	}
	if i, ok := med(FigIdleP99); ok {
		if l, ok := med(FigLoadedP99); ok {
			r.Median[FigRiseP99] = l - i
		}
	}
	bn, hasBN := bottleneckOf(outs)
	delay := func(backlog string, bps float64, okR bool) (float64, bool) {
		b, okB := med(backlog)
		if !okB || !okR || bps <= 0 {
			return 0, false
		}
		return b * 8 / bps * 1000, true
	}
	// A tbf drains at its rate; without one the streams' rate is the
	// nearest to the link's.
	drain, okD := med(FigForward)
	if hasBN {
		drain, okD = bn.rateBps, true
	}
	sd, okS := delay(FigSenderBacklog, drain, okD)
	if okS {
		r.Median[FigSenderDelay] = sd
	}
	back, okB := med(FigBack)
	rd, okR := delay(FigRecvBacklog, back, okB)
	if okR {
		r.Median[FigRecvDelay] = rd
	}
	r.Texts = map[string]string{}
	for _, o := range outs {
		if o.Step.Measure != MeasureQueue || o.Result == nil {
			continue
		}
		name := TextSenderLink
		if o.Step.Labels[LabelAt] == AtReceiver {
			name = TextRecvLink
		}
		if l, ok := busiest(o.Result.Queue); ok && r.Texts[name] == "" {
			r.Texts[name] = o.Step.Src.Node + " " + l.Link
		}
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	at, where := queueAt(r, okI && okL, sd, okS, rd, okR)
	r.Labels[LabelQueueAt] = at
	verdict := where
	if hasBN {
		verdict += bn.verdict(r, okI && okL)
	}
	r.Labels[LabelVerdict] = verdict
	r.Errors = append(r.Errors, outsideStreams(outs)...)
}

// outsideStreams names the loaded probes that ran partly outside their
// repetition's streams (an agent fetched its task late): their round
// trips are not all loaded ones.
func outsideStreams(outs []suite.Outcome) []string {
	type window struct{ from, to time.Time }
	span := func(r *probe.Result) window {
		return window{r.StartedAt, r.StartedAt.Add(time.Duration(r.DurationS * float64(time.Second)))}
	}
	streams := map[int]*window{}
	for _, o := range outs {
		if o.Step.Measure != MeasureStream || o.Result == nil || o.Result.StartedAt.IsZero() {
			continue
		}
		w := span(o.Result)
		if s := streams[o.Step.Repeat]; s == nil {
			streams[o.Step.Repeat] = &w
		} else {
			s.from, s.to = later(s.from, w.from), earlier(s.to, w.to)
		}
	}
	var out []string
	for _, o := range outs {
		s := streams[o.Step.Repeat]
		if o.Step.Labels[LabelLoad] != LoadLoaded || o.Step.Measure == MeasureStream || o.Result == nil || s == nil || o.Result.StartedAt.IsZero() {
			continue
		}
		w := span(o.Result)
		if w.from.Before(s.from) || w.to.After(s.to) {
			out = append(out, fmt.Sprintf("%s #%d ran partly outside the streams (%s to %s, streams %s to %s): not every sample is loaded",
				o.Step.Measure, o.Step.Repeat+1, w.from.Format("15:04:05.000"), w.to.Format("15:04:05.000"),
				s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000")))
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Thresholds of the verdict: a rise below noQueueMs (or below half the
// idle round trip) is no standing queue; a qdisc is where the queue was
// when its backlog explains at least explainShare of the rise.
const (
	noQueueMs    = 0.1
	explainShare = 0.5
)

// queueAt says where the loaded path's queue was: the short label and
// the sentence.
func queueAt(r *suite.Row, measured bool, sd float64, okS bool, rd float64, okR bool) (string, string) {
	if !measured {
		return "unknown", "no idle and loaded round trips to compare"
	}
	idle, loaded := r.Median[FigIdleP50], r.Median[FigLoadedP50]
	rise := loaded - idle
	if rise < noQueueMs || rise < idle/2 {
		return "none", fmt.Sprintf("no standing queue: loaded p50 %s ms against idle %s ms", suite.FormatMs(loaded), suite.FormatMs(idle))
	}
	if !okS && !okR {
		return "unknown", fmt.Sprintf("loaded p50 rose %s ms; no queue watch on the nodes (no host-network agent) to say where", suite.FormatMs(rise))
	}
	side, d, link := AtSender, sd, r.Texts[TextSenderLink]
	if okR && (!okS || rd > sd) {
		side, d, link = AtReceiver, rd, r.Texts[TextRecvLink]
	}
	if d >= explainShare*rise {
		return side + "'s qdisc", fmt.Sprintf("queue in the %s's qdisc (%s): its backlog holds %s ms of the %s ms rise",
			side, link, suite.FormatMs(d), suite.FormatMs(rise))
	}
	extra := ""
	if q, ok := r.Median[FigSqueezed]; ok && q > 0 {
		extra = fmt.Sprintf("; the receive softirq ran out of budget %.0f times", q)
	}
	return "path", fmt.Sprintf("queue on the path, not in a qdisc: the nodes' qdiscs hold %s ms of the %s ms rise (sockets, veth backlog, busy CPUs)%s",
		suite.FormatMs(max(sd, rd)), suite.FormatMs(rise), extra)
}

// bottleneck is the FIFO a path crosses, from its steps' labels.
type bottleneck struct {
	limitBytes, rateBps float64
}

// bottleneckOf returns the FIFO the outcomes' path crosses, if any.
func bottleneckOf(outs []suite.Outcome) (bottleneck, bool) {
	for _, o := range outs {
		limit, err1 := strconv.ParseFloat(o.Step.Labels[LabelLimitBytes], 64)
		rate, err2 := strconv.ParseFloat(o.Step.Labels[LabelRateBps], 64)
		if err1 == nil && err2 == nil && rate > 0 && limit > 0 {
			return bottleneck{limitBytes: limit, rateBps: rate}, true
		}
	}
	return bottleneck{}, false
}

// FullFillPct is how full the FIFO must run, its median backlog against
// its limit, for the verdict to judge the rise against the limit's delay:
// from there a rise equal to the backlog's delay is within
// ExpectTolerancePct of limit over rate.
const FullFillPct = 100 - ExpectTolerancePct

// verdict adds the FIFO's figures to r and returns what the verdict says
// of them: the p50 rise against both the FIFO's full delay (its limit at
// its rate, the reference) and the delay its queue held (its
// median backlog on the sending node's busiest qdisc, where the FIFO
// sits; its mean from a watch that gives no median), each within
// ExpectTolerancePct or not. When the FIFO ran below FullFillPct, the
// limit is not the queue's delay, and the verdict says so and why from
// the counters: a loss-based sender backing off at each drop, streams
// below its rate, or none dropped (on node-node TCP small queues cap
// each socket's bytes in its own node's qdisc).
func (b bottleneck) verdict(r *suite.Row, measured bool) string {
	full := b.limitBytes * 8 / b.rateBps * 1000
	r.Median[FigFullDelay] = full
	fifo := fmt.Sprintf("%.0f B at %s: %s ms", b.limitBytes, qosspec.FormatBps(uint64(b.rateBps)), suite.FormatMs(full))
	within := func(pct float64) string {
		if math.Abs(pct-100) > ExpectTolerancePct {
			return "not within"
		}
		return "within"
	}
	rise := r.Median[FigLoadedP50] - r.Median[FigIdleP50]
	pctFull := 100 * rise / full
	if measured {
		r.Median[FigRiseOfFull] = pctFull
	}
	ofFull := fmt.Sprintf("; loaded p50 rose %s ms: %.0f %% of the FIFO's limit/rate (%s)", suite.FormatMs(rise), pctFull, fifo)
	mean, ok := r.Median[FigSenderBacklog]
	if !ok || math.IsNaN(mean) {
		if !measured {
			return fmt.Sprintf("; no queue watch on the sending node read the FIFO's backlog (%s)", fifo)
		}
		return fmt.Sprintf("%s, %s %.0f %%; no queue watch on the sending node read the FIFO's backlog", ofFull, within(pctFull), ExpectTolerancePct)
	}
	backlog, which := mean, "median"
	if p50, ok := r.Median[FigSenderP50]; ok && !math.IsNaN(p50) {
		backlog = p50
	} else {
		which = "mean"
	}
	exp := backlog * 8 / b.rateBps * 1000
	fillPct := 100 * backlog / b.limitBytes
	r.Median[FigExpected], r.Median[FigFill] = exp, 100*mean/b.limitBytes
	if !measured {
		return ""
	}
	if exp <= 0 {
		return fmt.Sprintf("%s, %s %.0f %%, but the FIFO held no %s backlog on the sending node's counters", ofFull, within(pctFull), ExpectTolerancePct, which)
	}
	pctExp := 100 * rise / exp
	r.Median[FigRiseOfExpect] = pctExp
	ofExp := fmt.Sprintf("%.0f %% of the %s ms its %s backlog of %.0f B takes at its rate", pctExp, suite.FormatMs(exp), which, backlog)
	if fillPct >= FullFillPct {
		return fmt.Sprintf("%s, %s %.0f %%; the FIFO ran near full (%s backlog %.0f %% of its limit): %s",
			ofFull, within(pctFull), ExpectTolerancePct, which, fillPct, ofExp)
	}
	return fmt.Sprintf("%s, %s %.0f %%, but the FIFO was not kept full (%s backlog %.0f %% of its limit, under %.0f %%): %s; %s, %s %.0f %%",
		ofFull, within(pctFull), ExpectTolerancePct, which, fillPct, FullFillPct, b.notFull(r), ofExp, within(pctExp), ExpectTolerancePct)
}

// notFull says from the row's counters why the FIFO ran below its limit.
func (b bottleneck) notFull(r *suite.Row) string {
	fwd, okF := r.Median[FigForward]
	okF = okF && !math.IsNaN(fwd)
	if d, ok := r.Median[FigSenderDrops]; ok && d > 0 {
		rate := ""
		if okF {
			rate = fmt.Sprintf("forward %s; ", qosspec.FormatBps(uint64(fwd)))
		}
		return fmt.Sprintf("it dropped %.0f packets and the loss-based streams backed off at each drop, draining it below its limit (%smore streams, --set streams, back off less in all)", d, rate)
	}
	if okF && fwd < 0.9*b.rateBps {
		return fmt.Sprintf("it dropped nothing and the forward streams ran at %s, under 90 %% of its rate", qosspec.FormatBps(uint64(fwd)))
	}
	return "it dropped nothing: the senders never filled it (TCP small queues cap each socket's bytes in its own node's qdisc)"
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{FigIdleP50, FigIdleP99, FigLoadedP50, FigLoadedP99, FigLoadedLoss, FigRiseP50, FigRiseP99, FigRPMIdle, FigRPMLoaded,
		FigOWDIdle, FigOWDLoaded, FigForward, FigBack, FigRetransmits, FigExpected, FigFullDelay, FigFill, FigRiseOfExpect, FigRiseOfFull,
		FigSenderBacklog, FigSenderP50, FigSenderDelay, FigSenderDrops, FigRecvBacklog, FigRecvP50, FigRecvDelay, FigRecvDrops, FigSqueezed}
}

// Presentation implements suite.Presenter: a line per path, the verdict
// once per path.
func (Suite) Presentation() suite.Presentation {
	ms := func(head, metric string) suite.Column { return suite.Column{Head: head, Metric: metric} }
	return suite.Presentation{LabelOrder: []string{LabelBottleneck}, Conclusion: LabelVerdict, ConclusionOf: LabelBottleneck,
		Tables: []suite.Table{{Columns: []suite.Column{
			{Head: "path", Field: suite.FieldConnection},
			{Head: "bottleneck", Label: LabelBottleneck, Varying: true},
			ms("idle p50 ms", FigIdleP50), ms("idle p99", FigIdleP99),
			ms("loaded p50 ms", FigLoadedP50), ms("loaded p99", FigLoadedP99),
			ms("rise p50 ms", FigRiseP50), ms("rise p99", FigRiseP99),
			{Head: "expected ms", Metric: FigExpected, Optional: true},
			{Head: "FIFO full ms", Metric: FigFullDelay, Optional: true}, {Head: "FIFO fill %", Metric: FigFill, Format: "%.0f", Optional: true},
			{Head: "RPM idle", Metric: FigRPMIdle, Format: "%.0f"}, {Head: "RPM loaded", Metric: FigRPMLoaded, Format: "%.0f"},
			ms("owd idle ms", FigOWDIdle), ms("owd loaded", FigOWDLoaded),
			{Head: "fwd Mbit/s", Metric: FigForward, Div: 1e6, Format: "%.1f"},
			{Head: "back Mbit/s", Metric: FigBack, Div: 1e6, Format: "%.1f"},
			{Head: "queue at", Label: LabelQueueAt},
		}}}}
}
