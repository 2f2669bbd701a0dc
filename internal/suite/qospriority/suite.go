package qospriority

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
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
	// labelPlacement keeps the steps of the two placements apart while
	// rows are built (the rows say it as their connection).
	labelPlacement = "placement"
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
// On a cluster (caps.Kind kubernetes) the variants default to as-is and
// pod-htb and the placements to both; in the lab to the variants its
// backend can show, cross node.
//
// Settings (--set): variants, placement (same-node, cross-node),
// markings (comma-separated), high-dscp (the
// HTB high class's code points), bottleneck-rate, background-rate (bit/s,
// e.g. 1G), background (udp or tcp), background-marking, background-flows,
// queue (bottleneck queue in bytes, e.g. 1.5M), fg-pps, fg-size,
// ping-interval, hist-bin and hist-bins (the foreground's latency
// histogram, merged over repetitions), offload (auto, the default, or
// off for real datagrams through the bottleneck: see docs/probes.md).
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "does a DSCP/TOS mark protect a small flow from a flood? FIFO, pfifo_fast, HTB priority, VXLAN with and without tos inherit"
}

// OptionsFrom turns the common options and settings into Options before
// the environment is known; variants default to those of an
// unencapsulated path.
func OptionsFrom(o suite.Options) (Options, error) { return optionsFor(o, suite.Caps{}) }

// optionsFor is OptionsFrom in an environment with the caps given, whose
// defaults it takes and whose path the variants must fit.
func optionsFor(o suite.Options, caps suite.Caps) (Options, error) {
	var q Options
	if err := o.Validate(); err != nil {
		return q, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	q.Time = o.Time
	if err := Settings(&q).Apply(SuiteName, o); err != nil {
		return q, err
	}
	if len(q.Variants) == 0 {
		q.Variants = DefaultVariants(caps)
	}
	if len(q.Placements) == 0 && caps.AsIs {
		q.Placements = []string{PlacementSameNode, PlacementCrossNode}
	}
	if err := q.Validate(); err != nil {
		return q, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	for _, v := range q.Variants {
		if err := variantFitsPath(v, caps); err != nil {
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

// DefaultVariants are the variants the environment's path shows by
// default: on a network measured as it is (a cluster) the datapath as it
// is and the pod's own HTB tree (node-htb changes the node: asked for by
// name, with allow-node-qdisc); on a VXLAN path the VXLAN ones (there
// the plain HTB variant is the "vxlan" one); else the bottleneck variants.
func DefaultVariants(caps suite.Caps) []string {
	switch {
	case caps.AsIs:
		return []string{VariantAsIs, VariantPodHTB}
	case caps.Encap == suite.EncapVXLAN:
		return []string{VariantNone, VariantFIFO, VariantPfifoFast, VariantVXLAN, VariantVXLANInherit}
	}
	return []string{VariantNone, VariantFIFO, VariantPfifoFast, VariantHTBPriority}
}

// variantFitsPath refuses a variant the environment's path cannot show.
// Caps that name no capability (the environment is not known yet, or
// changes nothing, which the Runner refuses itself) pass.
func variantFitsPath(v string, caps suite.Caps) error {
	if len(caps.Have) == 0 && len(caps.Why) == 0 {
		return nil
	}
	vs, err := Options{}.SetupFor(v)
	if err != nil {
		return err
	}
	vx := caps.Encap == suite.EncapVXLAN
	switch {
	case vs.Path == PathVXLAN && !vx:
		return fmt.Errorf("variant %s needs VXLAN between the nodes and this environment's path has none (a lab built with --backend %s has it)", v, suite.EncapVXLAN)
	case v == VariantHTBPriority && vx:
		return fmt.Errorf("variant %s on a VXLAN path is the variant %s (outer TOS 0) or %s", v, VariantVXLAN, VariantVXLANInherit)
	}
	return nil
}

// Plan implements Suite: one concurrent phase per repetition, placement,
// variant and marking, from a pod to a pod on the same node or on
// another; the bottleneck sits on the sending pod's interface or the
// sending node's uplink (cross node only: traffic within a node never
// crosses it).
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	q, err := optionsFor(o, caps)
	if err != nil {
		return nil, err
	}
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	setups := map[string]VariantSetup{}
	for _, v := range q.Variants {
		vs, err := q.SetupFor(v)
		if err != nil {
			return nil, err
		}
		setups[v] = vs
	}
	_, asked := o.Set["placements"]
	if _, named := o.Set["placement"]; named {
		asked = true
	}
	groups := markingGroups(q.Markings)
	var phases []suite.Phase
	for _, pl := range q.Placements {
		conn := placementConnection[pl]
		pair, ok := pairs[conn]
		switch {
		case !ok && pl == PlacementCrossNode:
			return nil, fmt.Errorf("suite %s: needs pods on two nodes for the cross-node placement", s.Name())
		case !ok && asked:
			return nil, fmt.Errorf("suite %s: needs two pods on one node for the same-node placement", s.Name())
		case !ok:
			continue
		}
		var on []string
		for _, v := range q.Variants {
			if setups[v].OnPath(pl) {
				on = append(on, v)
			}
		}
		if len(on) == 0 {
			if asked {
				return nil, fmt.Errorf("suite %s: none of the variants %s changes the path within a node (they sit on the node's uplink); add as-is, pod-htb or pfifo_fast", s.Name(), strings.Join(q.Variants, ", "))
			}
			continue
		}
		for rep := 0; rep < o.Repeat; rep++ {
			for _, v := range on {
				for k, g := range groups {
					names := make([]string, len(g))
					for i, m := range g {
						names[i] = m.Name
					}
					ph := suite.Phase{Name: fmt.Sprintf("%s %s %s: %s, #%d", s.Name(), pl, v, strings.Join(names, " beside "), rep+1), Concurrent: true,
						Steps: qosSteps(q, v, rep*len(groups)+k, g, pair, conn, o.Backend)}
					ph.Steps = withWireWatch(withTunnel(ph.Steps, caps), agents, pair, rep*len(groups)+k, q)
					ph.Changes = setups[v].Changes(pair)
					phases = append(phases, ph)
				}
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
// Rows (with the variant and the connection).
func qosSteps(q Options, v string, idx int, ms []Marking, p suite.Pair, conn, backend string) []suite.Step {
	bgRate := q.BackgroundRateBps
	fgRate := uint64(q.ForegroundPPS * q.ForegroundSize * 8)
	timeout := probe.Duration(5 * time.Second)
	step := func(measure string, m *Marking, src, dst suite.Endpoint, spec probe.Spec) suite.Step {
		labels := map[string]string{LabelVariant: v, labelPlacement: conn}
		if m != nil {
			labels[LabelMarking], labels["tos"] = m.Name, strconv.Itoa(m.TOS)
		}
		return suite.Step{Connection: conn, Backend: backend, Measure: measure, Repeat: idx, Src: src, Dst: dst,
			Spec: spec, Exclusive: measure == MeasureBackground, Labels: labels}
	}
	var bgTOS *int
	if q.BackgroundMarking.TOS != 0 {
		tos := q.BackgroundMarking.TOS
		bgTOS = &tos
	}
	var steps []suite.Step
	if q.BackgroundProto == "tcp" {
		// One unpaced TCP task; its streams are the flows.
		bg := probe.Spec{Kind: probe.KindTCP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time + time.Second), TOS: bgTOS, Timeout: timeout}
		if q.BackgroundFlows > 1 {
			bg.Streams = q.BackgroundFlows
		}
		steps = append(steps, step(MeasureBackground, nil, p.Src, p.Dst, bg))
	} else {
		// The flows share the background rate equally, so the queue's load
		// does not change with their number.
		each := max(bgRate/uint64(q.BackgroundFlows), 1)
		for range q.BackgroundFlows {
			rate := each
			bg := probe.Spec{Kind: probe.KindUDP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time + time.Second),
				RateBps: &rate, Size: q.BackgroundSize, Offload: q.Offload, TOS: bgTOS, Timeout: timeout}
			steps = append(steps, step(MeasureBackground, nil, p.Src, p.Dst, bg))
		}
	}
	for _, m := range ms {
		fg := probe.Spec{Kind: probe.KindUDP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(q.Time), RateBps: &fgRate,
			Size: q.ForegroundSize, Offload: q.Offload, HistBinWidth: probe.Duration(q.HistBinWidth), HistBins: q.HistBins, Timeout: timeout}
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

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{"tos", "dscp", "ping.loss_pct", "reference_latency_ms.p99", "latency_histogram_bin_us", "latency_histogram_repetitions",
		"background_throughput_bps", "background_loss_pct", "background_flows", "background_dscp",
		"wire_dscp.outer", "wire_dscp.inner", "wire_dscp.packets", "wire_dscp.arrival.outer", "wire_dscp.arrival.inner", "wire_dscp.arrival.packets"}
}
