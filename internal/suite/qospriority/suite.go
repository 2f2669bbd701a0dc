package qospriority

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Measures of the QoS suites' steps.
const (
	MeasureBackground = "background"
	MeasureForeground = "foreground"
)

// Row label keys of qos-priority.
const (
	LabelVariant = "variant"
	LabelMarking = "marking"
	LabelVerdict = "verdict"
)

// Suite asks whether a DSCP/TOS mark protects a small flow from
// a flood sharing its path: per variant (where the queue is and what it
// does) and marking, a background UDP flood, and at the same time a
// foreground of small datagrams and a ping, both marked. Every variant
// but none asks its environment for a qdisc (on the sending node's uplink
// or the sending pod's eth0) and the vxlan-inherit variant for tos
// inherit on the VTEPs (suite.Change); the vxlan variants need the vxlan
// backend.
//
// Settings (--set): variants, markings (comma-separated), high-dscp (the
// HTB high class's code points), bottleneck-rate, background-rate (bit/s,
// e.g. 1G), background (udp or tcp), queue (bottleneck queue in bytes,
// e.g. 1.5M), fg-pps, fg-size, ping-interval, offload (auto, the default, or
// off for real datagrams through the bottleneck: see docs/probes.md).
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "does a DSCP/TOS mark protect a small flow from a flood? FIFO, pfifo_fast, HTB priority, VXLAN with and without tos inherit"
}

var qosPrioritySettings = []string{"variants", "markings", "high-dscp", "bottleneck-rate", "background-rate", "queue", "fg-pps", "fg-size", "ping-interval", "background", "offload"}

// OptionsFrom turns the common options and settings into
// Options; variants default to those the backend can show.
func OptionsFrom(o suite.Options) (Options, error) {
	var q Options
	if err := o.Validate(); err != nil {
		return q, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	if err := o.CheckSet(SuiteName, qosPrioritySettings...); err != nil {
		return q, err
	}
	q.Time = o.Time
	bad := func(k, v string, err error) error {
		return fmt.Errorf("suite %s: %s %q: %w", SuiteName, k, v, err)
	}
	for k, v := range o.Set {
		switch k {
		case "variants":
			for _, x := range strings.Split(v, ",") {
				q.Variants = append(q.Variants, strings.TrimSpace(x))
			}
		case "markings":
			for _, x := range strings.Split(v, ",") {
				m, err := ParseMarking(x)
				if err != nil {
					return q, bad(k, v, err)
				}
				q.Markings = append(q.Markings, m)
			}
		case "high-dscp":
			q.HighDSCP = []int{}
			for _, x := range strings.Split(v, ",") {
				d, err := parseDSCPStrict(x)
				if err != nil {
					return q, bad(k, v, err)
				}
				q.HighDSCP = append(q.HighDSCP, d)
			}
		case "offload":
			if v != probe.OffloadAuto && v != probe.OffloadOff {
				return q, bad(k, v, fmt.Errorf("want %s or %s", probe.OffloadAuto, probe.OffloadOff))
			}
			q.Offload = v
		case "bottleneck-rate", "background-rate":
			r, err := probe.ParseRate(v)
			if err != nil {
				return q, bad(k, v, err)
			}
			if r == 0 {
				return q, bad(k, v, errors.New("rate 0: give a rate above 0, e.g. 1G"))
			}
			if k == "bottleneck-rate" {
				q.BottleneckRateBps = r
			} else {
				q.BackgroundRateBps = r
			}
		case "queue":
			b, err := qosspec.ParseQuantity(v)
			if err != nil {
				return q, bad(k, v, err)
			}
			if b < 1500 || b > math.MaxUint32 {
				return q, bad(k, v, errors.New("want at least one full-size packet (1500 bytes) and below 4Gi"))
			}
			q.QueueBytes = uint32(b)
		case "background":
			q.BackgroundProto = v
		case "fg-pps", "fg-size":
			n, err := strconv.Atoi(v)
			if err != nil {
				return q, bad(k, v, errors.New("want a whole number"))
			}
			if k == "fg-pps" {
				q.ForegroundPPS = n
			} else {
				q.ForegroundSize = n
			}
		case "ping-interval":
			d, err := time.ParseDuration(v)
			if err != nil {
				return q, bad(k, v, err)
			}
			q.PingInterval = d
		}
	}
	if len(q.Variants) == 0 {
		q.Variants = DefaultVariants(o.Backend)
	}
	if err := q.Validate(); err != nil {
		return q, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	for _, v := range q.Variants {
		if err := variantFitsBackend(v, o.Backend); err != nil {
			return q, fmt.Errorf("suite %s: %w", SuiteName, err)
		}
	}
	return q.withDefaults(), nil
}

// parseDSCPStrict reads a DSCP name or number, and rejects numbers outside
// 0-63 with the value named.
func parseDSCPStrict(s string) (int, error) {
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && (n < 0 || n > 63) {
		return 0, fmt.Errorf("DSCP %d is outside 0-63", n)
	}
	return probe.ParseDSCP(s)
}

// DefaultVariants are the variants a backend can show: the VXLAN ones
// need VXLAN, and on VXLAN the plain HTB variant is the "vxlan" one.
func DefaultVariants(backend string) []string {
	if backend == "vxlan" {
		return []string{VariantNone, VariantFIFO, VariantPfifoFast, VariantVXLAN, VariantVXLANInherit}
	}
	return []string{VariantNone, VariantFIFO, VariantPfifoFast, VariantHTBPriority}
}

func variantFitsBackend(v, backend string) error {
	vx := v == VariantVXLAN || v == VariantVXLANInherit
	switch {
	case backend == "":
		return nil // unknown yet (checked again when the backend is known)
	case vx && backend != "vxlan":
		return fmt.Errorf("variant %s needs the vxlan backend (this run's backend is %s): run it on a vxlan lab (--backend vxlan)", v, backend)
	case v == VariantHTBPriority && backend == "vxlan":
		return fmt.Errorf("variant %s on the vxlan backend is the variant %s (outer TOS 0) or %s", v, VariantVXLAN, VariantVXLANInherit)
	}
	return nil
}

// Plan implements Suite: one concurrent phase per repetition, variant and
// marking, from a pod on one node to a pod on another; the bottleneck
// sits on the sending node's uplink.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, _ suite.Caps) ([]suite.Phase, error) {
	q, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	pair, ok := pairs[suite.PodPodCrossNode]
	if !ok {
		return nil, fmt.Errorf("suite %s: needs pods on two nodes (the bottleneck is between nodes)", s.Name())
	}
	setups := map[string]VariantSetup{}
	for _, v := range q.Variants {
		vs, err := q.SetupFor(v)
		if err != nil {
			return nil, err
		}
		setups[v] = vs
	}
	groups := markingGroups(q.Markings)
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		for _, v := range q.Variants {
			for k, g := range groups {
				names := make([]string, len(g))
				for i, m := range g {
					names[i] = m.Name
				}
				ph := suite.Phase{Name: fmt.Sprintf("%s %s: %s, #%d", s.Name(), v, strings.Join(names, " beside "), rep+1), Concurrent: true,
					Steps: qosSteps(q, v, rep*len(groups)+k, g, pair, o.Backend)}
				ph.Changes = setups[v].Changes(pair)
				phases = append(phases, ph)
			}
		}
	}
	return phases, nil
}

// markingGroups pairs each marking with the unmarked reference: one
// phase per marked marking, measured beside an unmarked flow under the
// same flood, so a busy CPU or a noisy neighbour hits both alike. Agents
// run at most four tasks at once, so a phase holds no more than the
// flood and two foregrounds from the sender (and two pings from the
// receiver).
func markingGroups(ms []Marking) [][]Marking {
	var none *Marking
	var marked []Marking
	for i := range ms {
		if ms[i].TOS == 0 {
			none = &ms[i]
			continue
		}
		marked = append(marked, ms[i])
	}
	var out [][]Marking
	for _, m := range marked {
		g := []Marking{m}
		if none != nil {
			g = []Marking{*none, m}
		}
		out = append(out, g)
	}
	if len(out) == 0 && none != nil {
		out = append(out, []Marking{*none})
	}
	return out
}

// qosSteps are one phase's concurrent flows: the unmarked background
// flood and, per marking, a foreground of small datagrams from the sender
// and a ping from the receiver (its echo replies carry the mark back
// through the sender's queues: Linux copies a request's TOS into its
// reply). The phase's index is the steps' Repeat, which pairs them up in
// Rows.
func qosSteps(q Options, v string, idx int, ms []Marking, p suite.Pair, backend string) []suite.Step {
	bgRate := q.BackgroundRateBps
	fgRate := uint64(q.ForegroundPPS * q.ForegroundSize * 8)
	timeout := probe.Duration(5 * time.Second)
	step := func(measure string, m *Marking, src, dst suite.Endpoint, spec probe.Spec) suite.Step {
		labels := map[string]string{LabelVariant: v}
		if m != nil {
			labels[LabelMarking], labels["tos"] = m.Name, strconv.Itoa(m.TOS)
		}
		return suite.Step{Connection: suite.PodPodCrossNode, Backend: backend, Measure: measure, Repeat: idx, Src: src, Dst: dst,
			Spec: spec, Exclusive: measure == MeasureBackground, Labels: labels}
	}
	bg := probe.Spec{Kind: probe.KindUDP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time + time.Second),
		RateBps: &bgRate, Size: q.BackgroundSize, Offload: q.Offload, Timeout: timeout}
	if q.BackgroundProto == "tcp" {
		bg = probe.Spec{Kind: probe.KindTCP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time + time.Second), Timeout: timeout}
	}
	steps := []suite.Step{step(MeasureBackground, nil, p.Src, p.Dst, bg)}
	for _, m := range ms {
		fg := probe.Spec{Kind: probe.KindUDP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time), RateBps: &fgRate,
			Size: q.ForegroundSize, Offload: q.Offload, HistBinWidth: probe.Duration(100 * time.Microsecond), HistBins: 300, Timeout: timeout}
		ping := probe.Spec{Kind: probe.KindPing, Target: p.Src.IP, Count: max(int(q.Time/q.PingInterval), 1),
			Interval: probe.Duration(q.PingInterval), Timeout: probe.Duration(2 * time.Second)}
		if m.TOS != 0 {
			tos := m.TOS
			fg.TOS, ping.TOS = &tos, &tos
		}
		steps = append(steps, step(MeasureForeground, &m, p.Src, p.Dst, fg), step(suite.MeasurePing, &m, p.Dst, p.Src, ping))
	}
	return steps
}

// Rows implements Suite: one row per variant and marking with the
// foreground's one-way latency, jitter, loss and rate, the marked ping's
// RTT and the background's throughput at the receiver (medians over the
// repetitions), each labelled with its variant's verdict.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	type vr struct {
		variant string
		rep     int
	}
	bg := map[vr]map[string]float64{}
	bgErrs := map[string][]string{}
	var marked []suite.Outcome
	for _, o := range outcomes {
		if o.Step.Measure != MeasureBackground {
			marked = append(marked, o)
			continue
		}
		figs := map[string]float64{}
		if o.Err == "" && o.Result != nil {
			figs, _ = qosFigures(o)
		} else {
			msg := o.Err
			if msg == "" {
				msg = "no result"
			}
			v := o.Step.Labels[LabelVariant]
			bgErrs[v] = append(bgErrs[v], fmt.Sprintf("background #%d: %s", o.Step.Repeat+1, msg))
		}
		bg[vr{o.Step.Labels[LabelVariant], o.Step.Repeat}] = figs
	}
	// The unmarked foreground's p99 beside each marked one (same phase).
	ref := map[vr]float64{}
	for _, o := range marked {
		if o.Step.Measure == MeasureForeground && o.Step.Labels["tos"] == "0" && o.Err == "" && o.Result != nil && o.Result.LatencyMs != nil {
			ref[vr{o.Step.Labels[LabelVariant], o.Step.Repeat}] = o.Result.LatencyMs.P99
		}
	}
	rows := suite.LabelRows(marked, []string{LabelVariant, LabelMarking, "tos"}, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		figs, ser := qosFigures(o)
		if o.Step.Measure == MeasureForeground {
			k := vr{o.Step.Labels[LabelVariant], o.Step.Repeat}
			for name, v := range bg[k] {
				figs[name] = v
			}
			if r, ok := ref[k]; ok && o.Step.Labels["tos"] != "0" {
				figs["reference_latency_ms.p99"] = r
			}
		}
		return figs, ser
	})
	for i := range rows {
		rows[i].Errors = append(rows[i].Errors, bgErrs[rows[i].Labels[LabelVariant]]...)
		if tos, err := strconv.Atoi(rows[i].Labels["tos"]); err == nil {
			rows[i].Median["tos"], rows[i].Median["dscp"] = float64(tos), float64(tos>>2)
		}
		delete(rows[i].Labels, "tos")
	}
	for _, v := range Verdicts(rows) {
		for i := range rows {
			if rows[i].Labels[LabelVariant] == v.Variant {
				rows[i].Labels[LabelVerdict] = v.Text
			}
		}
	}
	return rows
}

// qosFigures picks a step's figures under the probes' names: the
// foreground's as they are, the ping's RTT as rtt_ms (ping's loss as
// ping.loss_pct), the background's receiver rate as
// background_throughput_bps.
func qosFigures(o suite.Outcome) (map[string]float64, map[string][]float64) {
	m := probe.Metrics(o.Result)
	out := map[string]float64{}
	pick := func(from, to string) {
		if v, ok := m[from]; ok {
			out[to] = v
		}
	}
	switch o.Step.Measure {
	case MeasureForeground:
		for _, k := range []string{"min", "avg", "p50", "p90", "p99", "max", "stdev"} {
			pick("latency_ms."+k, "latency_ms."+k)
		}
		pick("jitter_ms", "jitter_ms")
		pick("loss_pct", "loss_pct")
		pick("pps", "pps")
		pick("dscp_received", "dscp_received")
		if h := o.Result.Histogram; h != nil && len(h.Counts) > 0 {
			// The latency histogram (the first repetition's) as a series.
			counts := make([]float64, len(h.Counts))
			for i, c := range h.Counts {
				counts[i] = float64(c)
			}
			out["latency_histogram_bin_us"] = h.BinWidthUs
			return out, map[string][]float64{"latency_histogram": counts}
		}
	case suite.MeasurePing:
		for _, k := range []string{"min", "avg", "p50", "p90", "p99", "max", "stdev"} {
			pick("rtt_ms."+k, "rtt_ms."+k)
		}
		pick("loss_pct", "ping.loss_pct")
	case MeasureBackground:
		pick("throughput_bps.receiver", "background_throughput_bps")
		pick("loss_pct", "background_loss_pct")
	}
	return out, nil
}

// Verdict thresholds: a queue "builds" when the unmarked foreground's p99
// is at least QueueingMs; a mark "protects" when it cuts p99 by at least
// ProtectFactor, and has some effect from PartialFactor.
const (
	QueueingMs    = 1.0
	ProtectFactor = 10.0
	PartialFactor = 2.0
)

// Verdict is the one-line conclusion for a variant.
type Verdict struct {
	Variant string `json:"variant"`
	// Effect is "protected", "partial", "none" or "unknown".
	Effect string `json:"effect"`
	// Factor is the unmarked p99 over the best marked p99 (0 if unknown).
	Factor float64 `json:"factor,omitempty"`
	Text   string  `json:"verdict"`
}

// Verdicts computes one verdict per variant from its rows: for each
// marked foreground, the p99 one-way latency of the unmarked foreground
// that ran beside it over its own; the best of these decides.
func Verdicts(rows []suite.Row) []Verdict {
	var order []string
	by := map[string][]suite.Row{}
	for _, r := range rows {
		v := r.Labels[LabelVariant]
		if _, ok := by[v]; !ok {
			order = append(order, v)
		}
		by[v] = append(by[v], r)
	}
	out := make([]Verdict, 0, len(order))
	for _, v := range order {
		out = append(out, verdictFor(v, by[v]))
	}
	return out
}

func verdictFor(variant string, rows []suite.Row) Verdict {
	v := Verdict{Variant: variant, Effect: "unknown"}
	// Each marked row carries the p99 of the unmarked flow that ran beside
	// it; without one, the unmarked row's own p99 is the reference.
	var unmarked *float64
	for _, r := range rows {
		if r.Median["tos"] == 0 {
			unmarked = suite.Fig(r, "latency_ms.p99")
		}
	}
	var best *suite.Row
	var bestB, bestM float64
	for i := range rows {
		r := &rows[i]
		m := suite.Fig(*r, "latency_ms.p99")
		if r.Median["tos"] == 0 || m == nil {
			continue
		}
		b := suite.Fig(*r, "reference_latency_ms.p99")
		if b == nil {
			b = unmarked
		}
		if b == nil {
			continue
		}
		if f := *b / math.Max(*m, 1e-6); best == nil || f > v.Factor {
			best, bestB, bestM, v.Factor = r, *b, *m, f
		}
	}
	switch {
	case best == nil && unmarked == nil:
		v.Text = "unknown: no unmarked foreground measured to compare with"
		return v
	case best == nil:
		v.Text = fmt.Sprintf("unknown: no marked foreground measured (unmarked p99 %s ms)", suite.FormatMs(*unmarked))
		return v
	}
	b, m, name := bestB, bestM, best.Labels[LabelMarking]
	switch {
	case b < QueueingMs:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: no queue builds where the qdisc sits (p99 unmarked %s ms, %s %s ms)", suite.FormatMs(b), name, suite.FormatMs(m))
	case v.Factor >= ProtectFactor:
		v.Effect = "protected"
		v.Text = fmt.Sprintf("priority protected the marked flow (%s): p99 %s ms → %s ms", name, suite.FormatMs(b), suite.FormatMs(m))
	case v.Factor >= PartialFactor:
		v.Effect = "partial"
		v.Text = fmt.Sprintf("partial: %s cut p99 %.1f× (%s ms → %s ms), less than the %g× of a priority queue", name, v.Factor, suite.FormatMs(b), suite.FormatMs(m), ProtectFactor)
	default:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: the queue where packets wait ignores the mark (p99 unmarked %s ms, %s %s ms)", suite.FormatMs(b), name, suite.FormatMs(m))
	}
	return v
}

// WriteTable writes the matrix (variant × marking) and the verdicts.
func (Suite) WriteTable(w io.Writer, rows []suite.Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tvariant\tmarking\tlat min\tavg\tp50\tp99\tmax\tstdev ms\tjitter ms\tloss %\tpps\tping avg\tping p99 ms\tbackground Mbit/s\t")
	for _, r := range rows {
		f := func(name string) string {
			if p := suite.Fig(r, name); p != nil {
				return suite.FormatMs(*p)
			}
			return "-"
		}
		bg := "-"
		if p := suite.Fig(r, "background_throughput_bps"); p != nil {
			bg = fmt.Sprintf("%.0f", *p/1e6)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Backend, r.Labels[LabelVariant], r.Labels[LabelMarking],
			f("latency_ms.min"), f("latency_ms.avg"), f("latency_ms.p50"), f("latency_ms.p99"), f("latency_ms.max"), f("latency_ms.stdev"),
			suite.FormatOpt(suite.Fig(r, "jitter_ms"), "%.3f"), suite.FormatOpt(suite.Fig(r, "loss_pct"), "%.2f"), suite.FormatOpt(suite.Fig(r, "pps"), "%.0f"),
			f("rtt_ms.avg"), f("rtt_ms.p99"), bg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "error %s/%s: %s\n", r.Labels[LabelVariant], r.Labels[LabelMarking], e)
		}
	}
	for _, v := range Verdicts(rows) {
		if _, err := fmt.Fprintf(w, "%-15s %s\n", v.Variant+":", v.Text); err != nil {
			return err
		}
	}
	return nil
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{"tos", "dscp", "ping.loss_pct", "reference_latency_ms.p99", "latency_histogram_bin_us", "background_throughput_bps", "background_loss_pct"}
}

// Presentation implements suite.Presenter: rows named by variant and
// marking, the verdict a note per variant, and the variant × marking
// matrices of the foreground's delay and the ping's round trip.
func (Suite) Presentation() suite.Presentation {
	matrix := func(metric, label string) suite.MatrixHint {
		return suite.MatrixHint{Title: fmt.Sprintf("qos-priority: %s by variant and marking", label), Metric: metric, Label: label,
			RowKey: LabelVariant, RowTitle: "variant (where the queue is)", ColKey: LabelMarking, ColTitle: "foreground marking"}
	}
	return suite.Presentation{LabelOrder: []string{LabelVariant, LabelMarking}, Conclusion: LabelVerdict, ConclusionOf: LabelVariant,
		Matrices: []suite.MatrixHint{matrix("latency_ms.p99", "foreground one-way delay p99"), matrix("rtt_ms.avg", "ping round trip avg")}}
}
