// Package contention is the suite of flows that compete: N equal flows
// from a node's pods into one receiver, through one bottleneck (cross
// node: a FIFO at a set rate on the sending node's uplink, or the path
// itself on a cluster) or into one pod on the same node, as the thesis's Tables 8 and 10 sent two bulk flows
// into one path. Rows per flow (throughput, loss, retransmits, share of
// the bottleneck) and per case (Jain's fairness index, the total against
// the bottleneck, whether the senders backed off).
package contention

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "contention"

// Row labels.
const (
	LabelPlacement = "placement"
	LabelProto     = "proto"
	LabelFlow      = "flow"
	// LabelBackedOff says, on a case row, whether every sender slowed to
	// what its flow delivered (congestion control) or kept sending more.
	LabelBackedOff = "backed_off"
	// LabelBottleneck names what the flows share: "1 Gbit/s FIFO" or
	// "receiver".
	LabelBottleneck = "bottleneck"
	// FlowAll is the flow label of a case row.
	FlowAll = "all"
)

// Placements.
const (
	SameNode  = "same-node"
	CrossNode = "cross-node"
)

// Options tune the suite.
type Options struct {
	Time   time.Duration
	Repeat int
	// Flows is the number of competing flows (default 2), from the
	// sending node's pods in turn (see senders).
	Flows int
	// Protos are the flows' protocols, one case each (default udp, tcp).
	Protos []string
	// RateBps is each flow's rate; 0 (the default) is unpaced: TCP as its
	// congestion control allows, UDP offered far above the path (see
	// unpacedUDP).
	RateBps uint64
	// BottleneckRateBps is the FIFO's rate on the sending node's uplink in
	// the cross-node case (default 1 Gbit/s; none on a network measured as
	// it is unless given, see fifo); QueueBytes its queue (default 12 ms at
	// the rate, at least 64 KiB). NoBottleneck (bottleneck-rate=none)
	// puts no FIFO anywhere.
	BottleneckRateBps uint64
	QueueBytes        uint32
	NoBottleneck      bool
	// Placements are same-node and cross-node (default: both where the
	// agents allow).
	Placements []string
	UDPSize    int
	Offload    string
}

func (o Options) withDefaults() Options {
	if o.Flows == 0 {
		o.Flows = 2
	}
	if len(o.Protos) == 0 {
		o.Protos = []string{"udp", "tcp"}
	}
	if o.BottleneckRateBps == 0 {
		o.BottleneckRateBps = 1e9
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = uint32(max(o.BottleneckRateBps/8*12/1000, 64*1024))
	}
	if o.UDPSize == 0 {
		o.UDPSize = 1400
	}
	if o.Offload == "" {
		o.Offload = probe.OffloadAuto
	}
	return o
}

// OptionsFrom reads the common options and the settings.
func OptionsFrom(o suite.Options) (Options, error) {
	c := Options{Time: o.Time, Repeat: o.Repeat}
	if err := o.Validate(); err != nil {
		return c, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	if err := Settings(&c).Apply(SuiteName, o); err != nil {
		return c, err
	}
	return c.withDefaults(), nil
}

// Suite is the contention suite.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "N equal flows into one receiver or through one bottleneck, same node and cross node: per-flow share, Jain's fairness, back-off"
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// senders picks, per placement, the flows' senders and the receiver,
// with the pods there are: same node, a pod on the node with the most pods
// receives and the node's other pods send, in turn when there are fewer
// than flows (a cluster's default deploy runs two agent pods per node);
// cross node, that node's pods send, in turn, to a pod on another node. A
// placement the agents cannot give is missing, with the reason.
func senders(agents []suite.Endpoint, n int) (map[string][]suite.Pair, map[string]string) {
	pods := map[string][]suite.Endpoint{}
	var nodes []string
	for _, e := range agents {
		if e.HostNetwork {
			continue
		}
		if _, ok := pods[e.Node]; !ok {
			nodes = append(nodes, e.Node)
		}
		pods[e.Node] = append(pods[e.Node], e)
	}
	slices.Sort(nodes)
	out, why := map[string][]suite.Pair{}, map[string]string{}
	var src string
	for _, nd := range nodes {
		if src == "" || len(pods[nd]) > len(pods[src]) {
			src = nd
		}
	}
	if len(nodes) < 2 {
		why[CrossNode] = "needs pods on two nodes"
	} else {
		var dst suite.Endpoint
		for _, nd := range nodes {
			if nd != src {
				dst = pods[nd][0]
				break
			}
		}
		for i := range n {
			out[CrossNode] = append(out[CrossNode], suite.Pair{Src: pods[src][i%len(pods[src])], Dst: dst})
		}
	}
	if src == "" || len(pods[src]) < 2 {
		why[SameNode] = "needs two pods on one node, a receiver and a sender (lab: --pods-per-node 2; a cluster's deploy runs two agent pods per node)"
	} else {
		dst, from := pods[src][0], pods[src][1:]
		for i := range n {
			out[SameNode] = append(out[SameNode], suite.Pair{Src: from[i%len(from)], Dst: dst})
		}
	}
	return out, why
}

// fifo says whether the cross-node case puts its own FIFO on the sending
// node's uplink: where the network is the run's own (a lab), unless
// bottleneck-rate is none; on a network measured as it is (a cluster),
// only when bottleneck-rate is given, so a real link can be the
// bottleneck.
func fifo(c Options, o suite.Options, caps suite.Caps) bool {
	if c.NoBottleneck {
		return false
	}
	_, asked := o.Set["bottleneck-rate"]
	return asked || !caps.AsIs
}

// Plan implements suite.Suite: per repetition, placement and protocol one
// phase in which every flow runs at once; cross node with a FIFO at the
// bottleneck rate on the sending node's uplink.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	c, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	pairs, why := senders(agents, c.Flows)
	placements := c.Placements
	if len(placements) == 0 {
		for _, p := range []string{SameNode, CrossNode} {
			if _, ok := pairs[p]; ok {
				placements = append(placements, p)
			}
		}
		if len(placements) == 0 {
			return nil, fmt.Errorf("suite %s: same node %s; cross node %s", s.Name(), why[SameNode], why[CrossNode])
		}
	}
	for _, p := range placements {
		if _, ok := pairs[p]; !ok {
			return nil, fmt.Errorf("suite %s: placement %s %s", s.Name(), p, why[p])
		}
	}
	withFIFO := fifo(c, o, caps)
	if !withFIFO {
		c.BottleneckRateBps = 0
	}
	if slices.Contains(placements, CrossNode) && withFIFO && !caps.Has(suite.CapNodeQdisc) {
		return nil, fmt.Errorf("suite %s: the cross-node bottleneck of %s needs to %s: %s (or --set bottleneck-rate=none to let the path itself be the bottleneck, or --set placement=%s)",
			s.Name(), qosspec.FormatBps(c.BottleneckRateBps), suite.CapNodeQdisc.Describe(), caps.Reason(suite.CapNodeQdisc), SameNode)
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		for _, pl := range placements {
			for _, proto := range c.Protos {
				ps := pairs[pl]
				ph := suite.Phase{Name: fmt.Sprintf("%s %s %d×%s, #%d", s.Name(), pl, c.Flows, proto, rep+1), Concurrent: true,
					Steps: flowSteps(c, pl, proto, rep, ps, o.Backend)}
				if pl == CrossNode && withFIFO {
					spec := &qosspec.Spec{Setup: qosspec.SpecBottleneck, RateBps: c.BottleneckRateBps, QueueBytes: c.QueueBytes}
					ph.Changes = []suite.Change{{What: suite.CapNodeQdisc, Member: ps[0].Src.Node, QoS: spec}}
				}
				phases = append(phases, ph)
			}
		}
	}
	return phases, nil
}

// bottleneckLabel names what the flows of a placement share.
func bottleneckLabel(c Options, placement string) string {
	switch {
	case placement == SameNode:
		return "receiver"
	case c.BottleneckRateBps == 0:
		return "path"
	}
	return qosspec.FormatBps(c.BottleneckRateBps) + " FIFO"
}

// unpacedUDP is the rate of an "unpaced" UDP flood: ten times the
// FIFO (cross node) or 10 Gbit/s (same node, or no FIFO), far above what
// the path takes, so the sender sends as fast as it can up to that. A truly
// unbounded UDP flow is refused by the server (--max-packet-rate).
func unpacedUDP(c Options, placement string) uint64 {
	if placement == CrossNode && c.BottleneckRateBps != 0 {
		return 10 * c.BottleneckRateBps
	}
	return 10e9
}

// flowSteps are the phase's flows, one per sender, all to one receiver.
func flowSteps(c Options, placement, proto string, rep int, pairs []suite.Pair, backend string) []suite.Step {
	conn := suite.PodPodCrossNode
	if placement == SameNode {
		conn = suite.PodPodSameNode
	}
	var steps []suite.Step
	for i, p := range pairs {
		rate := c.RateBps
		if rate == 0 && proto == "udp" {
			rate = unpacedUDP(c, placement)
		}
		spec := probe.Spec{Kind: probe.KindTCP, Target: p.Dst.ResponderAddr, Duration: probe.Duration(c.Time),
			Timeout: probe.Duration(5 * time.Second)}
		if proto == "udp" {
			spec.Kind, spec.Size, spec.Offload = probe.KindUDP, c.UDPSize, c.Offload
		}
		if rate != 0 {
			spec.RateBps = &rate
		}
		labels := map[string]string{LabelPlacement: placement, LabelProto: proto,
			LabelFlow: strconv.Itoa(i + 1), LabelBottleneck: bottleneckLabel(c, placement)}
		if placement == CrossNode && c.BottleneckRateBps != 0 {
			labels[labelLimit] = strconv.FormatUint(c.BottleneckRateBps, 10)
		}
		steps = append(steps, suite.Step{Connection: conn, Backend: backend, Measure: MeasureFlow, Repeat: rep, Src: p.Src, Dst: p.Dst,
			Spec: spec, Exclusive: true, Labels: labels})
	}
	return steps
}
