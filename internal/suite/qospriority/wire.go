package qospriority

import (
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
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

// Labels of a phase's steps on a path whose tunnel the environment
// described (Caps): the CNI's name and the metadata-mode tunnel devices
// read off the nodes. Rows keep them as the texts wire_dscp.cni and
// wire_dscp.metadata_tunnels, so the remedy a verdict names is the path's.
const (
	labelTunnelCNI = "tunnel_cni"
	labelTunnelMD  = "tunnel_metadata"
	wireCNIKey     = "wire_dscp.cni"
	wireMDKey      = "wire_dscp.metadata_tunnels"
)

// withTunnel labels steps with what caps says of the path's tunnel
// (nothing where it says nothing).
func withTunnel(steps []suite.Step, caps suite.Caps) []suite.Step {
	if caps.CNI.Name == "" && len(caps.MetadataTunnels) == 0 {
		return steps
	}
	for i := range steps {
		if caps.CNI.Name != "" {
			steps[i].Labels[labelTunnelCNI] = caps.CNI.Name
		}
		if len(caps.MetadataTunnels) > 0 {
			steps[i].Labels[labelTunnelMD] = strings.Join(caps.MetadataTunnels, ",")
		}
	}
	return steps
}

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
// each row (the first repetition's that saw packets), and the path's
// tunnel as its steps' labels say it.
func setWireEncap(rows []suite.Row, outcomes []suite.Outcome) {
	for _, o := range outcomes {
		for i := range rows {
			r := &rows[i]
			if r.Labels[LabelVariant] != o.Step.Labels[LabelVariant] || r.Labels[LabelMarking] != o.Step.Labels[LabelMarking] {
				continue
			}
			for label, key := range map[string]string{labelTunnelCNI: wireCNIKey, labelTunnelMD: wireMDKey} {
				if v := o.Step.Labels[label]; v != "" {
					if r.Texts == nil {
						r.Texts = map[string]string{}
					}
					r.Texts[key] = v
				}
			}
		}
	}
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
// wire (MarkWhere) and, where it was lost at encapsulation, what
// carries it: "mark lost at encapsulation (outer 0, inner 46; the remedy
// ...)" naming the vxlan-inherit variant where it was not the one run and
// tos inherit can carry the mark, else what does (suite.MarkCarrier: on
// a metadata-mode tunnel no device setting); seen is false when no watch
// saw the row's packets.
func wireNote(r suite.Row) (note string, lost, seen bool) {
	note, atEncap, lost, seen := MarkWhere(r)
	switch {
	case !atEncap:
		return note, lost, seen
	case r.Texts[wireMDKey] != "":
		carrier, _ := suite.MarkCarrier(r.Texts[wireCNIKey], suite.EncapVXLAN, strings.Split(r.Texts[wireMDKey], ","))
		note = strings.TrimSuffix(note, ")") + "; " + carrier + ")"
	case r.Labels[LabelVariant] != VariantVXLANInherit:
		note = strings.TrimSuffix(note, ")") + fmt.Sprintf("; the remedy, tos inherit: --set variants=%s)", VariantVXLANInherit)
	}
	return note, lost, seen
}

// MarkWhere says where a marked row's mark (its figure dscp) was on the
// sending node's wire, from the watch's figures alone: "mark on the wire
// (outer 46)", "mark lost at encapsulation (outer 0, inner 46)" (atEncap)
// or "mark lost before the wire (outer 0, sent 46)"; seen is false when
// no watch saw the row's packets.
func MarkWhere(r suite.Row) (note string, atEncap, lost, seen bool) {
	outer := suite.Fig(r, wireKey+"outer")
	sent := suite.Fig(r, "dscp")
	if outer == nil || sent == nil {
		return "", false, false, false
	}
	inner := suite.Fig(r, wireKey+"inner")
	switch {
	case *outer == *sent:
		return fmt.Sprintf("mark on the wire (outer %.0f)", *outer), false, false, true
	case inner != nil && *inner == *sent:
		return fmt.Sprintf("mark lost at encapsulation (outer %.0f, inner %.0f)", *outer, *inner), true, true, true
	}
	return fmt.Sprintf("mark lost before the wire (outer %.0f, sent %.0f)", *outer, *sent), false, true, true
}

// MarkOnWire says where a marked row's mark was on the sending node's
// wire (as the verdicts say it, remedy included): note, whether it was
// lost there, and whether a watch saw the row's packets at all.
func MarkOnWire(r suite.Row) (note string, lost, seen bool) { return wireNote(r) }

// WithWireWatch gives each marked step of steps whose Measure is
// MeasureForeground a fixed source port and adds a watch of it (Measure
// MeasureWire, lasting d) on the host-network agents of both of p's
// nodes, as qos-priority's phases have; idx keeps phases' ports apart.
func WithWireWatch(steps []suite.Step, agents []suite.Endpoint, p suite.Pair, idx int, d time.Duration) []suite.Step {
	return withWireWatch(steps, agents, p, idx, Options{Time: d})
}

// WireFigures are a watch outcome's figures for its row (wire_dscp.*
// from the sending node's, wire_dscp.arrival.* from the receiving
// node's), as MarkWhere reads them.
func WireFigures(o suite.Outcome) map[string]float64 { return wireFigures(o) }
