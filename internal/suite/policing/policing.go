// Package policing is the suite of policing a pod's traffic, the two ways
// the thesis (seed 004) tried it: the police action on what the pod sends,
// on arrival at its host-side veth, and the CNI bandwidth plugin's limit on
// what it receives (kubernetes.io/ingress-bandwidth). Like shaping, it measures the
// receiver's rate per 100 ms and the loss below, at and above the rate, or
// gives one row saying why the kernel cannot police.
package policing

import (
	"fmt"
	"sort"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// SuiteName is the suite's name.
const SuiteName = "policing"

// LabelUnsupported marks the single row of a policing run on a kernel
// without the police action.
const LabelUnsupported = "unsupported"

// LabelVariant names what limited the flows of a row.
const LabelVariant = "variant"

// The variants: the police action, and the CNI bandwidth plugin's ingress
// limit.
const (
	VariantPolice     = "police"
	VariantCNIIngress = "cni-ingress"
)

// Suite polices a pod's traffic and measures, like shaping, the
// receiver's rate per 100 ms and the loss of the limited flows. Two
// variants:
//
//   - police: what the pod sends, on arrival at its host-side veth (ingress
//     qdisc, match-all u32 filter, the police action dropping what exceeds
//     the rate), TCP and UDP below, at and above it. On a kernel without the police action
//     (act_police) the variant is one row saying so, with a short ping
//     between the pods so the row is stored with a run.
//   - cni-ingress: the CNI bandwidth plugin's ingress limit
//     (kubernetes.io/ingress-bandwidth: a tbf at the root of the host-side
//     veth), by default one UDP flow at the limit and one at 100 times it
//     (the thesis's failing case: 1 Mbit/s against 100 Mbit/s), run when
//     ingress-bandwidth is set or the variant is asked for.
//
// Every flow is bounded by its duration and the probe's timeout; the
// flows into the limited pod run from the lowest load to the highest, so
// a backlog one flow leaves in the limiter's queue delays no flow after it
// but the flood, which comes last.
//
// Settings (--set): rate (the police action's, bits/s, default 10M),
// burst (bytes, default 32Ki), ingress-bandwidth (the CNI's limit, bits/s;
// default the rate), variants (police,cni-ingress), protos, loads
// (below, at, above, flood), udp-size, placement (same-node, cross-node:
// the policed pod's peer on its node or on another; default both where
// the agents allow).
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "policing a pod: the police action on what it sends, the CNI's ingress-bandwidth on what it receives; receiver rate and loss, or why the kernel cannot police"
}

// options are the suite's settings read.
type options struct {
	police   shaping.Options // EgressBps is the police rate
	ingress  shaping.Options // IngressBps is the CNI's limit
	variants []string
}

// optionsFrom reads the settings.
func optionsFrom(o suite.Options) (options, error) {
	var po options
	if err := o.Validate(); err != nil {
		return po, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	so := shaping.Options{Time: o.Time, EgressBps: 10e6}
	var ingressBps uint64
	if err := settings(&po, &so, &ingressBps).Apply(SuiteName, o); err != nil {
		return po, err
	}
	if po.variants == nil {
		po.variants = []string{VariantPolice}
		if ingressBps != 0 {
			po.variants = append(po.variants, VariantCNIIngress)
		}
	}
	if err := so.Validate(); err != nil {
		return po, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	in := so
	in.EgressBps, in.IngressBps = 0, ingressBps
	if in.IngressBps == 0 {
		in.IngressBps = so.EgressBps
	}
	if _, ok := o.Set["protos"]; !ok {
		in.Protos = []string{"udp"}
	}
	if _, ok := o.Set["loads"]; !ok {
		in.Loads = []string{shaping.LoadAt, shaping.LoadFlood}
	}
	if err := in.Validate(); err != nil {
		return po, fmt.Errorf("suite %s: %s: %w", SuiteName, VariantCNIIngress, err)
	}
	in = in.WithDefaults()
	// Lowest load first: a flow above the limit leaves a backlog in the
	// limiter's queue that would delay the start of the next one.
	sort.SliceStable(in.Loads, func(i, j int) bool { return shaping.LoadFactor[in.Loads[i]] < shaping.LoadFactor[in.Loads[j]] })
	po.police, po.ingress = so.WithDefaults(), in
	return po, nil
}

// MayUse implements suite.CapUser: the police action, and the CNI's
// bandwidth limit.
func (Suite) MayUse() []suite.Cap { return []suite.Cap{suite.CapPolice, suite.CapPodShaping} }

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := optionsFrom(o)
	return err
}

// Plan implements Suite.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	po, err := optionsFrom(o)
	if err != nil {
		return nil, err
	}
	po.police, po.ingress = po.police.OnPath(caps), po.ingress.OnPath(caps)
	placed, err := suite.PlacedPairs(agents, po.police.Placements)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	var phases []suite.Phase
	for _, pp := range placed {
		for _, v := range po.variants {
			switch v {
			case VariantPolice:
				phases = append(phases, s.policePhases(po.police, pp, o, caps, len(po.variants) > 1)...)
			case VariantCNIIngress:
				phases = append(phases, s.ingressPhases(po.ingress, pp, o)...)
			}
		}
	}
	return phases, nil
}

// policePhases are the police variant's phases: the police action on the
// pod's host-side veth, or, where the kernel lacks it (or, beside another
// variant, where the environment cannot police), one row saying why.
func (s Suite) policePhases(so shaping.Options, pp suite.PlacedPair, o suite.Options, caps suite.Caps, others bool) []suite.Phase {
	pair := pp.Pair
	if why, ok := caps.Unsupported[suite.CapPolice]; ok {
		// The kernel under the environment cannot police: that is the result.
		return []suite.Phase{unsupportedPhase(s.Name(), pp, o.Backend, why)}
	}
	if !caps.Has(suite.CapPolice) && others {
		// Alone, the variant is refused up front (the runner names what is
		// missing); beside a variant that can run it is a row saying why.
		return []suite.Phase{unsupportedPhase(s.Name(), pp, o.Backend, "not run: "+caps.Reason(suite.CapPolice))}
	}
	police := qosspec.Spec{Setup: qosspec.SpecPolice, RateBps: so.EgressBps, BurstBytes: so.Bursts[0]}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		steps := shaping.LimitSteps(so, so.Bursts[0], rep, pp, o.Backend)
		for i := range steps {
			steps[i].Labels[shaping.LabelDirection] = "police"
			steps[i].Connection = fmt.Sprintf("pod %s policed", pair.Src.Name)
		}
		phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s %s %s at %s, #%d", s.Name(), pp.Placement, pair.Src.Name, qosspec.FormatBps(so.EgressBps), rep+1),
			Steps: steps, Changes: []suite.Change{{What: suite.CapPolice, Member: pair.Src.Name, QoS: &police}}})
	}
	return phases
}

// ingressPhases are the cni-ingress variant's phases: the bandwidth
// plugin's ingress limit on the pod (suite.CapPodShaping), as made (a
// fresh pod's bucket, not drained first: the time to conform shows the
// burst the CNI gives), the flows into it from its peer.
func (s Suite) ingressPhases(so shaping.Options, pp suite.PlacedPair, o suite.Options) []suite.Phase {
	pair := pp.Pair
	burst := so.Bursts[0]
	spec := qosspec.Spec{Setup: qosspec.SpecBandwidth, IngressRateBps: so.IngressBps, IngressBurstBytes: burst}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s %s %s ingress-bandwidth %s, #%d", s.Name(), pp.Placement, pair.Src.Name, qosspec.FormatBps(so.IngressBps), rep+1),
			Steps:   shaping.LimitSteps(so, burst, rep, pp, o.Backend),
			Changes: []suite.Change{{What: suite.CapPodShaping, Member: pair.Src.Name, QoS: &spec, AsMade: true}}})
	}
	return phases
}

// unsupportedPhase is the policing run on a kernel that cannot police:
// one short, bounded ping whose row says why nothing else was measured.
func unsupportedPhase(name string, pp suite.PlacedPair, backend string, why string) suite.Phase {
	p := pp.Pair
	return suite.Phase{Name: name + " " + pp.Placement + ": " + why, Steps: []suite.Step{{
		Connection: fmt.Sprintf("pod %s policed", p.Src.Name), Backend: backend, Measure: suite.MeasurePing, Src: p.Src, Dst: p.Dst,
		Spec:   probe.Spec{Kind: probe.KindPing, Target: p.Dst.IP, Count: 3, Interval: probe.Duration(10 * time.Millisecond), Timeout: probe.Duration(time.Second)},
		Labels: map[string]string{LabelUnsupported: why, shaping.LabelPlacement: pp.Placement},
	}}}
}

// Rows implements Suite: the limited flows' rows and the rows saying why
// a variant measured nothing, each labelled with its variant, placement
// and verdict (shaping.SetLimitVerdicts, per placement and variant).
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	var rows []suite.Row
	var flows []suite.Outcome
	for _, o := range outcomes {
		msg, ok := o.Step.Labels[LabelUnsupported]
		if !ok {
			flows = append(flows, o)
			continue
		}
		rows = append(rows, suite.Row{Connection: o.Step.Connection, Backend: o.Step.Backend, Src: suite.EndpointLabel(o.Step.Src), Dst: suite.EndpointLabel(o.Step.Dst),
			Median: map[string]float64{"supported": 0}, Min: map[string]float64{}, Max: map[string]float64{},
			Labels: map[string]string{LabelUnsupported: msg, LabelVariant: VariantPolice, shaping.LabelVerdict: VariantPolice + ": not measured: " + msg}})
		if pl := o.Step.Labels[shaping.LabelPlacement]; pl != "" {
			rows[len(rows)-1].Labels[shaping.LabelPlacement] = pl
		}
	}
	limited := shaping.LimitRows(flows)
	for i := range limited {
		limited[i].Median["supported"] = 1
		limited[i].Labels[LabelVariant] = VariantPolice
		if limited[i].Labels[shaping.LabelDirection] == shaping.DirIngress {
			limited[i].Labels[LabelVariant] = VariantCNIIngress
		}
	}
	shaping.SetLimitVerdicts(limited)
	return append(rows, limited...)
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string { return append([]string{"supported"}, shaping.LimitMetrics...) }

// Presentation implements suite.Presenter: as shaping's rows; a path
// the police action could not be measured on has no line, its verdict
// says why.
func (Suite) Presentation() suite.Presentation {
	p := shaping.LimitPresentation()
	p.LabelOrder = append([]string{LabelVariant}, p.LabelOrder...)
	for i := range p.Tables {
		p.Tables[i].Lacks = LabelUnsupported
	}
	return p
}
