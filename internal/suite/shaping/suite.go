package shaping

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "shaping"

// CapPodShaping is the capability shaping's changes use.
const CapPodShaping = suite.CapPodShaping

// Row label keys of shaping and policing.
const (
	LabelDirection = "direction"
	LabelProto     = "proto"
	LabelLoad      = "load"
	LabelBurst     = "burst"
	// LabelPlacement is the row's placement (same-node, cross-node).
	LabelPlacement = "placement"
	// LabelVerdict is the one-line conclusion of a placement's rows.
	LabelVerdict = "verdict"
	// labelLimit, labelBurstBytes and labelMTU carry the numbers the row's
	// figures are computed against; Rows turns them into figures.
	labelLimit      = "limit_bps"
	labelBurstBytes = "burst_bytes"
	labelMTU        = "mtu"
)

// Suite limits one pod the way the CNI bandwidth plugin does for
// the kubernetes.io/egress-bandwidth and ingress-bandwidth annotations
// and measures, at the receiver every 100 ms, what TCP and UDP below, at
// and above the limit get: the steady state against the goodput the limit
// allows, the first interval's overshoot and the time to conform, per
// burst size. It asks its environment for the limit (suite.CapPodShaping):
// the lab puts it on the pod's veth, Kubernetes starts a pod with the
// annotations.
//
// Settings (--set): egress-bandwidth, ingress-bandwidth (Kubernetes
// quantities in bits/s: 10M, 1G), burst (bytes, a list: 32Ki,4Mi), protos
// (tcp,udp), loads (below,at,above), udp-size, placement (same-node,
// cross-node: the shaped pod's peer on its node or on another; default
// both where the agents allow).
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "pod bandwidth limits as the CNI bandwidth plugin sets them: receiver rate per 100 ms, steady state, overshoot, time to conform"
}

// OptionsFrom turns the common options and settings into
// Options (default: egress 10M).
func OptionsFrom(o suite.Options) (Options, error) {
	var so Options
	if err := o.Validate(); err != nil {
		return so, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	so.Time = o.Time
	if err := Settings(&so).Apply(SuiteName, o); err != nil {
		return so, err
	}
	if so.EgressBps == 0 && so.IngressBps == 0 {
		so.EgressBps = 10e6
	}
	if err := so.Validate(); err != nil {
		return so, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	return so.WithDefaults(), nil
}

// OnPath returns o for the environment's path: the pods' MTU where the
// environment knows it.
func (o Options) OnPath(caps suite.Caps) Options {
	if caps.PathMTU != 0 {
		o.MTU = caps.PathMTU
	}
	return o
}

// Plan implements Suite: per repetition, placement and burst one phase
// with the limit on the shaped pod's host-side veth (the pod sending to a
// pod on its own node, or on another), its flows one after another.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	so, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	so = so.OnPath(caps)
	if _, set := o.Set["burst"]; set && caps.Has(CapPodShaping) && !caps.Has(suite.CapPodBurst) {
		return nil, fmt.Errorf("suite %s: --set burst: %s", s.Name(), caps.Reason(suite.CapPodBurst))
	}
	for _, k := range []string{"drain", "annotations"} {
		if _, set := o.Set[k]; set && !caps.Has(suite.CapPodAnnotations) {
			return nil, fmt.Errorf("suite %s: --set %s: only where pods are limited through annotations (a CNI's token bucket): %s", s.Name(), k, caps.Reason(suite.CapPodAnnotations))
		}
	}
	placed, err := suite.PlacedPairs(agents, so.Placements)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		for _, pp := range placed {
			for _, burst := range so.Bursts {
				spec := qosspec.Spec{Setup: qosspec.SpecBandwidth, EgressRateBps: so.EgressBps, IngressRateBps: so.IngressBps}
				if so.EgressBps != 0 {
					spec.EgressBurstBytes = burst
				}
				if so.IngressBps != 0 {
					spec.IngressBurstBytes = burst
				}
				phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s %s %s, burst %s, #%d", s.Name(), pp.Placement, pp.Pair.Src.Name, FormatBytes(burst), rep+1),
					Steps:   LimitSteps(so, burst, rep, pp, o.Backend),
					Changes: []suite.Change{{What: CapPodShaping, Member: pp.Pair.Src.Name, QoS: &spec, AsMade: so.NoDrain, Annotations: so.Annotations}}})
			}
		}
	}
	return phases, nil
}

// LimitSteps are the flows of one shaping or policing phase: per limited
// direction, protocol and load, from the pod (egress) or to it (ingress),
// labelled with the pair's placement.
func LimitSteps(so Options, burst uint32, rep int, pp suite.PlacedPair, backend string) []suite.Step {
	p := pp.Pair
	var steps []suite.Step
	for _, dir := range []string{DirEgress, DirIngress} {
		limit := so.EgressBps
		src, dst := p.Src, p.Dst
		if dir == DirIngress {
			limit, src, dst = so.IngressBps, p.Dst, p.Src
		}
		if limit == 0 {
			continue
		}
		for _, proto := range so.Protos {
			for _, load := range so.Loads {
				rate := uint64(LoadFactor[load] * float64(limit))
				spec := probe.Spec{Kind: proto, Target: dst.ResponderAddr, Duration: probe.Duration(so.Time),
					Interval: probe.Duration(Interval), RateBps: &rate, Timeout: probe.Duration(5 * time.Second)}
				if proto == "udp" {
					spec.Size = so.UDPSize
				}
				steps = append(steps, suite.Step{Connection: fmt.Sprintf("pod %s %s", p.Src.Name, dir), Backend: backend,
					Measure: proto, Repeat: rep, Src: src, Dst: dst, Spec: spec, Exclusive: true,
					Labels: map[string]string{LabelPlacement: pp.Placement, LabelDirection: dir, LabelProto: proto, LabelLoad: load, LabelBurst: FormatBytes(burst),
						labelLimit: strconv.FormatUint(limit, 10), labelBurstBytes: strconv.FormatUint(uint64(burst), 10),
						labelMTU: strconv.Itoa(so.MTU)}})
			}
		}
	}
	return steps
}

// Rows implements Suite: one row per placement, direction, protocol, load
// and burst, each labelled with its placement's verdict.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	rows := LimitRows(outcomes)
	SetLimitVerdicts(rows)
	return rows
}

// LimitRows are the rows of limited flows (shaping's and policing's): one
// per placement, direction, protocol, load and burst. Where the environment chose the
// burst itself (Step.Applied: the CNI on Kubernetes), the rows carry that
// burst, labelled with who chose it.
func LimitRows(outcomes []suite.Outcome) []suite.Row {
	outcomes = appliedBursts(outcomes)
	rows := suite.LabelRows(outcomes, []string{LabelPlacement, LabelDirection, LabelProto, LabelLoad, LabelBurst, labelLimit, labelBurstBytes, labelMTU}, shapingFigures)
	for i := range rows {
		if rows[i].Labels[LabelPlacement] == "" {
			delete(rows[i].Labels, LabelPlacement) // a run stored before placements
		}
		for _, k := range []string{labelLimit, labelBurstBytes} {
			if v, err := strconv.ParseFloat(rows[i].Labels[k], 64); err == nil {
				rows[i].Median[k], rows[i].Min[k], rows[i].Max[k] = v, v, v
			}
			delete(rows[i].Labels, k)
		}
		delete(rows[i].Labels, labelMTU)
	}
	return rows
}

// appliedBursts relabels the steps whose environment chose the burst:
// the burst as made ("537MB (CNI)"), not the one asked for.
func appliedBursts(outcomes []suite.Outcome) []suite.Outcome {
	out := make([]suite.Outcome, len(outcomes))
	for i, o := range outcomes {
		out[i] = o
		a := o.Step.Applied
		if a == nil || a.QoS == nil || o.Step.Labels[LabelBurst] == "" {
			continue
		}
		burst := max(a.QoS.EgressBurstBytes, a.QoS.IngressBurstBytes, a.QoS.BurstBytes)
		if burst == 0 {
			continue
		}
		labels := maps.Clone(o.Step.Labels)
		labels[LabelBurst] = fmt.Sprintf("%.0fMB (%s)", float64(burst)/1e6, a.By)
		labels[labelBurstBytes] = strconv.FormatUint(uint64(burst), 10)
		out[i].Step.Labels = labels
	}
	return out
}

// shapingFigures analyses one flow's receiver series against the rate
// the limit allows.
func shapingFigures(o suite.Outcome) (map[string]float64, map[string][]float64) {
	lb := o.Step.Labels
	limit, _ := strconv.ParseUint(lb[labelLimit], 10, 64)
	mtu, _ := strconv.Atoi(lb[labelMTU])
	if mtu == 0 {
		mtu = 1500
	}
	payload := o.Step.Spec.Size
	if payload == 0 {
		payload = 1400
	}
	offered := 0.0
	if o.Step.Spec.RateBps != nil {
		offered = float64(*o.Step.Spec.RateBps)
	}
	good := GoodputBps(limit, lb[LabelProto], payload, mtu)
	expected := good
	if offered > 0 && offered < good {
		expected = offered
	}
	out := map[string]float64{"offered_bps": offered, "goodput_bps": good, "expected_bps": expected}
	if v := o.Result.LossPct; v != nil {
		out["loss_pct"] = *v
	}
	if v := o.Result.Retransmits; v != nil {
		// TCP's retransmissions: the thesis prefers shaping to policing
		// because a policer's drops make TCP resend (§7).
		out["retransmits"] = float64(*v)
	}
	ser := SeriesBps(o.Result.Intervals, Interval, o.Step.Spec.Duration.D())
	if len(ser) == 0 {
		return out, nil
	}
	a := AnalyzeSeries(ser, Interval, expected)
	out["first_interval_bps"] = a.FirstBps
	out["steady_state_bps"] = a.SteadyBps
	out["steady_state_mean_bps"] = a.SteadyMeanBps
	out["overshoot_pct"] = 100 * (a.FirstBps - expected) / expected
	out["steady_state_error_pct"] = 100 * (a.SteadyBps - expected) / expected
	// excess_bytes: what arrived above the expected rate before the flow
	// conformed (to the end when it never did, then a lower bound): the
	// token bucket the flow met, measured, beside the burst read back.
	end := len(ser)
	if a.ConformS != nil {
		end = min(end, int(*a.ConformS/Interval.Seconds()+0.5))
	}
	excess := 0.0
	for _, bps := range ser[:end] {
		excess += max(0, bps-expected) * Interval.Seconds() / 8
	}
	out["excess_bytes"] = excess
	if a.ConformS != nil {
		out["time_to_conform_s"] = *a.ConformS
	}
	return out, map[string][]float64{"intervals_bps": ser}
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// LimitMetrics are the figures the rows of a limited flow add to the
// probes' (shaping's and policing's).
var LimitMetrics = []string{"limit_bps", "burst_bytes", "offered_bps", "goodput_bps", "expected_bps", "steady_state_bps", "steady_state_mean_bps",
	"steady_state_error_pct", "first_interval_bps", "overshoot_pct", "time_to_conform_s"}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string { return LimitMetrics }

// LimitPresentation is how the rows of limited flows are shown: named by
// direction, protocol, load and burst, a line per flow with its limit,
// rates and conformance, the verdict per placement, and each flow's
// receiver rate per 100 ms against its limit.
func LimitPresentation() suite.Presentation {
	keys := []string{LabelPlacement, LabelDirection, LabelProto, LabelLoad, LabelBurst}
	mb := func(head, metric string) suite.Column {
		return suite.Column{Head: head, Metric: metric, Div: 1e6, Format: "%.2f"}
	}
	table := suite.Table{Columns: []suite.Column{
		{Head: "placement", Label: LabelPlacement, Optional: true},
		{Head: "direction", Label: LabelDirection}, {Head: "proto", Label: LabelProto},
		{Head: "load", Label: LabelLoad}, {Head: "burst", Label: LabelBurst},
		mb("limit Mbit/s", labelLimit), mb("offered", "offered_bps"), mb("goodput", "goodput_bps"), mb("steady", "steady_state_bps"),
		{Head: "err %", Metric: "steady_state_error_pct", Format: "%+.1f"},
		mb("first 100ms", "first_interval_bps"),
		{Head: "overshoot %", Metric: "overshoot_pct", Format: "%+.0f"},
		{Head: "conform s", Metric: "time_to_conform_s", Format: "%.1f", Missing: "never"},
		{Head: "loss %", Metric: "loss_pct", Format: "%.2f"},
		{Head: "retransmits", Metric: "retransmits", Format: "%.0f"},
	}}
	return suite.Presentation{LabelOrder: keys, Conclusion: LabelVerdict, ConclusionOf: LabelPlacement, Tables: []suite.Table{table},
		Series: &suite.SeriesHint{Series: "intervals_bps", Limit: "limit_bps", Interval: Interval, NameLabels: keys}}
}

// Presentation implements suite.Presenter.
func (Suite) Presentation() suite.Presentation { return LimitPresentation() }
