package cniqos

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
)

// A mark across the tunnel (ClassTunnelMark) and its remedy: the marked
// flow and the wire watches are qos-priority's (qospriority.WithWireWatch,
// qospriority.MarkWhere), so both suites read the wire alike.

// Labels of the tunnel-mark steps: what carries a mark the tunnel loses
// (suite.MarkCarrier, as the environment's caps said it at Plan time),
// so stored runs keep the verdict they had.
const (
	labelCarrier    = "carrier"
	labelTOSInherit = "tos_inherit" // "true": the carrier is the device's tos inherit
	roleWire        = "wire"        // a watch on a node's wire
	// RemedySuffix ends the name of the row that tries, or says why not,
	// what carries a mark the tunnel loses ("tunnel-mark remedy").
	RemedySuffix = " remedy"
)

// wireDuration is how long the marked flows of the DSCP rows run.
const wireDuration = time.Second

// tunnelMarkPhases plans f (ClassTunnelMark) between e's pods: the mark
// as the datapath carries it, and its remedy. With the device's tos
// inherit as the carrier and the environment able to apply it (the
// allow-node-qdisc opt-in), a second phase applies it on both nodes and
// measures again; else a note row says what carries the mark and why it
// is not tried (metadata-mode tunnel: nothing does).
func tunnelMarkPhases(name string, f Feature, o suite.Options, e ends, agents []suite.Endpoint, caps suite.Caps) (phases []suite.Phase, notes []suite.Step) {
	carrier, tosInherit := suite.MarkCarrier(caps.CNI.Name, caps.Encap, caps.MetadataTunnels)
	pair := suite.Pair{Src: e.src, Dst: e.dst}
	marked := func(feat Feature, idx int) []suite.Step {
		tos := int(feat.Value) << 2
		rate := uint64(1e6)
		st := step(feat, o.Backend, roleFlow, e.src, e.dst, probe.Spec{Kind: probe.KindUDP, Target: e.dst.ResponderAddr,
			Duration: probe.Duration(wireDuration), RateBps: &rate, Size: 200, TOS: &tos})
		st.Measure = qospriority.MeasureForeground
		st.Labels[labelCarrier] = carrier
		st.Labels[labelTOSInherit] = strconv.FormatBool(tosInherit)
		return wireRoles(qospriority.WithWireWatch([]suite.Step{st}, agents, pair, idx, wireDuration))
	}
	phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s %s %s", name, f.CNI, f.Name), Concurrent: true, Steps: marked(f, 0)})
	remedy := f
	remedy.Name = f.Name + RemedySuffix
	switch {
	case tosInherit && caps.Has(suite.CapVXLANTOS):
		ph := suite.Phase{Name: fmt.Sprintf("%s %s %s (tos inherit)", name, f.CNI, remedy.Name), Concurrent: true, Steps: marked(remedy, 1)}
		for _, node := range []string{e.src.Node, e.dst.Node} {
			ph.Changes = append(ph.Changes, suite.Change{What: suite.CapVXLANTOS, Member: node})
		}
		for i := range ph.Steps {
			ph.Steps[i].Labels[LabelSet] = "tos inherit on the nodes' VXLAN devices"
		}
		phases = append(phases, ph)
	default:
		verdict, why := Untried, carrier+"; "+caps.Reason(suite.CapVXLANTOS)
		if !tosInherit {
			verdict, why = None, carrier
		}
		st := step(remedy, o.Backend, roleNote, e.src, e.dst,
			probe.Spec{Kind: probe.KindPing, Target: e.dst.IP, Count: 3, Interval: probe.Duration(200 * time.Millisecond)})
		st.Labels[LabelVerdict], st.Labels[LabelWhy] = verdict, why
		notes = append(notes, st)
	}
	return phases, notes
}

// wireRoles gives the watches qospriority.WithWireWatch added the role
// wire and the marked step's role as wire_of, so a row's roles stay apart.
func wireRoles(steps []suite.Step) []suite.Step {
	for i := range steps {
		if steps[i].Measure == qospriority.MeasureWire {
			steps[i].Labels = maps.Clone(steps[i].Labels)
			steps[i].Labels[labelWireOf] = steps[i].Labels[labelRole]
			steps[i].Labels[labelRole] = roleWire
		}
	}
	return steps
}

// labelWireOf names the role of the flow a watch looked for.
const labelWireOf = "wire_of"

// watchDSCP puts a wire watch beside each flow of a DSCP feature's
// phase (each its own source port), so its row says the mark on the
// sending node's wire, outer and inner, for traffic leaving the cluster
// and to a pod. The flows carry an explicit TOS 0: the mark is the CNI's
// to make.
func watchDSCP(ph suite.Phase, agents []suite.Endpoint) suite.Phase {
	var steps []suite.Step
	for i, st := range ph.Steps {
		zero := 0
		st.Spec.TOS = &zero
		st.Measure = qospriority.MeasureForeground
		steps = append(steps, wireRoles(qospriority.WithWireWatch([]suite.Step{st}, agents, suite.Pair{Src: st.Src, Dst: st.Dst}, i, wireDuration))...)
	}
	ph.Steps, ph.Concurrent = steps, true
	return ph
}

// wireRow puts the watches' figures on r: unprefixed for the tunnel-mark
// rows (wire_dscp.outer, as qospriority.MarkWhere reads them), under the
// watched flow's role for the DSCP rows (wire_dscp.pod.outer).
func wireRow(r *suite.Row, wires []suite.Outcome, prefixed bool) {
	for _, o := range wires {
		for k, v := range qospriority.WireFigures(o) {
			if prefixed {
				k = strings.Replace(k, "wire_dscp.", "wire_dscp."+o.Step.Labels[labelWireOf]+".", 1)
			}
			r.Median[k] = v
		}
	}
}

// tunnelMark judges a tunnel-mark row (the datapath as it is, or with
// its remedy applied) from the flow's mark on arrival and on the sending
// node's wire.
func tunnelMark(r *suite.Row, flow suite.Outcome, hasFlow bool, value float64) Judgement {
	labels := flow.Step.Labels
	r.Median["dscp"] = value
	arrived := ""
	if hasFlow && flow.Result != nil && flow.Result.DSCPReceived != nil {
		r.Median["dscp_received"] = float64(*flow.Result.DSCPReceived)
		arrived = fmt.Sprintf("; arrived as %d", *flow.Result.DSCPReceived)
	}
	where, atEncap, lost, seen := qospriority.MarkWhere(*r)
	remedy := strings.HasSuffix(r.Labels[LabelFeature], RemedySuffix)
	switch {
	case !seen:
		return Judgement{NotMeasured, strings.TrimPrefix(strings.Join(append([]string{"no watch saw the marked flow on the sending node's wire"}, r.Errors...), "; "), "; ")}
	case !lost && remedy:
		return Judgement{Works, fmt.Sprintf("with tos inherit on the nodes' VXLAN devices: %s%s; each device's own setting restored after", where, arrived)}
	case !lost:
		return Judgement{Works, where + arrived}
	case atEncap && !remedy:
		return Judgement{NoEffect, fmt.Sprintf("%s%s; %s", where, arrived, labels[labelCarrier])}
	}
	return Judgement{NoEffect, where + arrived}
}

// dscpWire says a DSCP row's marks on the sending node's wire ("" when no
// watch saw them).
func dscpWire(r suite.Row) string {
	var parts []string
	for _, role := range []string{roleLeaving, rolePod} {
		o, ok := r.Median["wire_dscp."+role+".outer"]
		if !ok {
			continue
		}
		p := fmt.Sprintf("%s outer %.0f", map[string]string{roleLeaving: "leaving", rolePod: "to a pod"}[role], o)
		if in, ok := r.Median["wire_dscp."+role+".inner"]; ok {
			p += fmt.Sprintf(" inner %.0f", in)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return "; on the sending node's wire: " + strings.Join(parts, ", ")
}
