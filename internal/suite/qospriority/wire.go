package qospriority

import (
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// MeasureWire is a wire watch (probe kind wire) beside a marked
// foreground: the host-network agents of the sending and the receiving
// node each watch their node's underlay for the foreground's datagrams
// and report the DSCP they carry there, outer and (inside VXLAN) inner.
const MeasureWire = "wire"

// labelWireAt names the node whose underlay a watch looked at.
const (
	labelWireAt = "wire_at"
	wireAtSrc   = "src"
	wireAtDst   = "dst"
)

// wirePortBase is the first source port a marked foreground sends from
// (plus the phase's index, modulo wirePorts), so a watch can single it
// out from the unmarked foreground and the flood between the same pods:
// above Linux's default ephemeral range (32768-60999), where the kernel
// does not pick ports itself.
const (
	wirePortBase = 61000
	wirePorts    = 4000
)

// wireLead is how long the foregrounds of a watched phase wait before
// their first datagram, so the watches' sockets (on other agents, started
// with the phase) are open first; the background runs a second longer
// than the foregrounds, so they still run inside it.
const wireLead = 250 * time.Millisecond

// Row figures of the watches: at the sending node's underlay (the
// bottleneck's side) under wire_dscp, at the receiving node's under
// wire_dscp.arrival; the encapsulation seen as the text wire_dscp.encap.
const (
	wireKey        = "wire_dscp."
	wireArrivalKey = "wire_dscp.arrival."
	wireEncapKey   = "wire_dscp.encap"
)

// hostAgent returns the host-network agent of node.
func hostAgent(agents []suite.Endpoint, node string) (suite.Endpoint, bool) {
	for _, a := range agents {
		if a.HostNetwork && a.Node == node {
			return a, true
		}
	}
	return suite.Endpoint{}, false
}

// withWireWatch gives each marked foreground of a phase a fixed source
// port and adds a watch of it on the host-network agents of both nodes
// (started with the phase, so the watch's socket is open before the
// foreground, which first connects and compares clocks, sends its first
// datagram; it runs as long as the background). Without a host-network
// agent on both nodes, or for a pair on one node (whose traffic never
// crosses the underlay), the phase is left as it is.
func withWireWatch(steps []suite.Step, agents []suite.Endpoint, p suite.Pair, idx int, q Options) []suite.Step {
	srcHost, okSrc := hostAgent(agents, p.Src.Node)
	dstHost, okDst := hostAgent(agents, p.Dst.Node)
	_, portText, err := net.SplitHostPort(p.Dst.ResponderAddr)
	port, perr := strconv.Atoi(portText)
	if !okSrc || !okDst || err != nil || perr != nil || p.Src.Node == p.Dst.Node {
		return steps
	}
	n := len(steps)
	for i := 0; i < n; i++ {
		if steps[i].Measure == MeasureForeground {
			// Both foregrounds alike, so the pair still compares.
			steps[i].Spec.StartDelay = probe.Duration(wireLead)
		}
	}
	for i := 0; i < n; i++ {
		fg := &steps[i]
		if fg.Measure != MeasureForeground || fg.Spec.TOS == nil {
			continue
		}
		fg.Spec.SourcePort = wirePortBase + idx%wirePorts
		flow := probe.WatchFlow{Proto: "udp", Src: p.Src.IP, Dst: p.Dst.IP, SrcPort: fg.Spec.SourcePort, DstPort: port}
		for _, at := range []struct {
			name     string
			on, peer suite.Endpoint
		}{{wireAtSrc, srcHost, dstHost}, {wireAtDst, dstHost, srcHost}} {
			labels := maps.Clone(fg.Labels)
			labels[labelWireAt] = at.name
			steps = append(steps, suite.Step{Connection: fg.Connection, Backend: fg.Backend, Measure: MeasureWire, Repeat: fg.Repeat,
				Src: at.on, Dst: at.peer, Labels: labels,
				Spec: probe.Spec{Kind: probe.KindWire, Target: at.peer.IP, Duration: probe.Duration(q.Time + time.Second), Watch: &flow}})
		}
	}
	return steps
}

// wireFigures are a watch's figures for its row: the forward direction's
// packets and DSCPs, under wire_dscp (sending node) or wire_dscp.arrival
// (receiving node).
func wireFigures(o suite.Outcome) map[string]float64 {
	out := map[string]float64{}
	w := o.Result.WireDSCP
	if w == nil {
		return out
	}
	prefix := wireKey
	if o.Step.Labels[labelWireAt] == wireAtDst {
		prefix = wireArrivalKey
	}
	out[prefix+"packets"] = float64(w.Packets)
	if w.Outer != nil {
		out[prefix+"outer"] = float64(*w.Outer)
	}
	if w.Inner != nil {
		out[prefix+"inner"] = float64(*w.Inner)
	}
	return out
}

// setWireEncap puts the encapsulation the sending node's watch saw on
// each row (the first repetition's that saw packets).
func setWireEncap(rows []suite.Row, outcomes []suite.Outcome) {
	for _, o := range outcomes {
		if o.Step.Measure != MeasureWire || o.Step.Labels[labelWireAt] != wireAtSrc || o.Result == nil ||
			o.Result.WireDSCP == nil || o.Result.WireDSCP.Encap == "" {
			continue
		}
		for i := range rows {
			r := &rows[i]
			if r.Labels[LabelVariant] != o.Step.Labels[LabelVariant] || r.Labels[LabelMarking] != o.Step.Labels[LabelMarking] {
				continue
			}
			if _, done := r.Texts[wireEncapKey]; done {
				continue
			}
			if r.Texts == nil {
				r.Texts = map[string]string{}
			}
			r.Texts[wireEncapKey] = o.Result.WireDSCP.Encap
		}
	}
}

// wireOuter is "outer N": the outer DSCP the sending node's watch saw.
func wireOuter(r suite.Row) string {
	if o := suite.Fig(r, wireKey+"outer"); o != nil {
		return fmt.Sprintf("outer %.0f", *o)
	}
	return "outer unknown"
}

// wireNote says where a marked row's mark was on the sending node's
// wire: "mark lost at encapsulation (outer 0, inner 46; the remedy ...)"
// naming the vxlan-inherit variant where it was not the one run, "mark lost
// before the wire (outer 0, sent 46)" or "mark on the wire (outer 46)";
// seen is false when no watch saw the row's packets.
func wireNote(r suite.Row) (note string, lost, seen bool) {
	outer := suite.Fig(r, wireKey+"outer")
	sent := suite.Fig(r, "dscp")
	if outer == nil || sent == nil {
		return "", false, false
	}
	inner := suite.Fig(r, wireKey+"inner")
	switch {
	case *outer == *sent:
		return fmt.Sprintf("mark on the wire (outer %.0f)", *outer), false, true
	case inner != nil && *inner == *sent && r.Labels[LabelVariant] != VariantVXLANInherit:
		return fmt.Sprintf("mark lost at encapsulation (outer %.0f, inner %.0f; the remedy, tos inherit: --set variants=%s)", *outer, *inner, VariantVXLANInherit), true, true
	case inner != nil && *inner == *sent:
		return fmt.Sprintf("mark lost at encapsulation (outer %.0f, inner %.0f)", *outer, *inner), true, true
	}
	return fmt.Sprintf("mark lost before the wire (outer %.0f, sent %.0f)", *outer, *sent), true, true
}

// MarkOnWire says where a marked row's mark was on the sending node's
// wire (as the verdicts say it): note, whether it was lost there, and
// whether a watch saw the row's packets at all.
func MarkOnWire(r suite.Row) (note string, lost, seen bool) { return wireNote(r) }
