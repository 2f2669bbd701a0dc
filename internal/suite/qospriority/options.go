// Package qospriority is the suite that asks whether a DSCP/TOS mark
// protects a small flow from a flood sharing its path: per variant (where
// the queue is and what it does: none, a FIFO bottleneck, pfifo_fast, an
// HTB priority tree, the tree behind VXLAN with and without tos inherit)
// and marking, a background flood beside a marked foreground flow and a
// marked ping, with a verdict per variant.
package qospriority

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "qos-priority"

// Variants of qos-priority: where the queue is and what it does.
const (
	// VariantNone: no bottleneck, no qdisc added.
	VariantNone = "none"
	// VariantFIFO: a FIFO bottleneck (tbf) on the sending node's uplink.
	VariantFIFO = "fifo"
	// VariantPfifoFast: pfifo_fast on the sending pod's veth at line rate,
	// as the seed study did; no bottleneck anywhere.
	VariantPfifoFast = "pfifo_fast"
	// VariantHTBPriority: an HTB tree at the bottleneck with a
	// high-priority class for the marked DSCPs.
	VariantHTBPriority = "htb-priority"
	// VariantVXLAN: the HTB tree at the bottleneck, traffic over VXLAN
	// with the default outer TOS 0.
	VariantVXLAN = "vxlan"
	// VariantVXLANInherit: the same with the VTEPs copying the inner TOS
	// to the outer header (tos inherit).
	VariantVXLANInherit = "vxlan-inherit"
	// VariantAsIs: the datapath as the CNI made it, nothing added (on a
	// cluster; the lab's none).
	VariantAsIs = "as-is"
	// VariantPodHTB: the HTB tree on the sending pod's own interface, at
	// the bottleneck rate (below the path's capacity), so the queue forms
	// where the priority is honoured: a pod protecting its own marked
	// traffic.
	VariantPodHTB = "pod-htb"
	// VariantNodeHTB: the HTB tree on the sending node's interface toward
	// the other node (on a cluster only with allow-node-qdisc).
	VariantNodeHTB = "node-htb"
)

// Variants lists the variants in the order they run and are shown.
var Variants = []string{VariantNone, VariantFIFO, VariantPfifoFast, VariantHTBPriority, VariantVXLAN, VariantVXLANInherit,
	VariantAsIs, VariantPodHTB, VariantNodeHTB}

// Placements: where the flood and the flows meet. Cross node, they share
// the sending node's way out (a NIC's queue on a real node); within one
// node, only the sending pod's interface and the node's bridge.
const (
	PlacementSameNode  = "same-node"
	PlacementCrossNode = "cross-node"
)

// placementConnection is each placement's connection (the rows').
var placementConnection = map[string]string{PlacementSameNode: suite.PodPodSameNode, PlacementCrossNode: suite.PodPodCrossNode}

// Marking is the TOS byte the foreground flow carries.
type Marking struct {
	Name string `json:"name"` // "none", "TOS 0x10", "EF"
	TOS  int    `json:"tos"`  // the byte: DSCP << 2
}

// DSCP returns the marking's code point.
func (m Marking) DSCP() int { return m.TOS >> 2 }

// ParseMarking reads a marking: "none", a TOS byte ("0x10", "tos:0x10",
// "tos=16") or a DSCP name or number ("EF", "AF41", "dscp:46").
func ParseMarking(s string) (Marking, error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(t)
	switch {
	case low == "none" || low == "":
		if low == "" {
			return Marking{}, errors.New("marking: empty (want none, a TOS byte such as 0x10, or a DSCP such as EF)")
		}
		return Marking{Name: "none"}, nil
	case strings.HasPrefix(low, "tos:") || strings.HasPrefix(low, "tos="):
		return tosMarking(t[4:])
	case strings.HasPrefix(low, "0x"):
		return tosMarking(t)
	case strings.HasPrefix(low, "dscp:") || strings.HasPrefix(low, "dscp="):
		t = t[5:]
	}
	d, err := probe.ParseDSCP(t)
	if err != nil {
		return Marking{}, fmt.Errorf("marking %q: %w", s, err)
	}
	if d == 0 {
		return Marking{Name: "none"}, nil
	}
	return Marking{Name: probe.DSCPName(d), TOS: d << 2}, nil
}

func tosMarking(s string) (Marking, error) {
	v, err := probe.ParseTOS(s)
	if err != nil {
		return Marking{}, fmt.Errorf("marking: %w", err)
	}
	if v == 0 {
		return Marking{Name: "none"}, nil
	}
	return Marking{Name: fmt.Sprintf("TOS 0x%02x", v), TOS: v}, nil
}

// DefaultMarkings are the seed study's marks plus EF: none, TOS 0x08
// (maximise throughput), TOS 0x10 (minimise delay), EF.
func DefaultMarkings() []Marking {
	return []Marking{{Name: "none"}, {Name: "TOS 0x08", TOS: 0x08}, {Name: "TOS 0x10", TOS: 0x10}, {Name: "EF", TOS: 46 << 2}}
}

// AgentSlots is an agent's default --max-parallel: the tasks it runs at
// once.
const AgentSlots = 4

// The foreground's latency histogram by default: 100 µs bins up to 30 ms,
// past the 12 ms a full bottleneck queue adds (the last bin holds
// everything beyond).
const (
	DefaultHistBinWidth = 100 * time.Microsecond
	DefaultHistBins     = 300
)

// DefaultHighDSCP are the code points the HTB tree's high class takes:
// EF and DSCP 4 (TOS 0x10, "minimise delay", which pfifo_fast also puts
// in its first band). TOS 0x08 asks for throughput, not delay, and stays
// in the default class.
var DefaultHighDSCP = []int{46, 4}

// Options tune qos-priority.
type Options struct {
	Variants []string // default Variants
	// Placements are PlacementSameNode and PlacementCrossNode (default:
	// both on a cluster, cross node in the lab, whose bottleneck variants
	// sit on the node's uplink).
	Placements []string
	Markings   []Marking // default DefaultMarkings
	// HighDSCP are the code points of the HTB tree's high class (default
	// DefaultHighDSCP).
	HighDSCP []int
	// BottleneckRateBps is the rate of the bottleneck on the sending
	// node's uplink (default 1 Gbit/s).
	BottleneckRateBps uint64
	// LinkRateBps is the rate of the link the bottleneck sits on when
	// known; a bottleneck above it is an error.
	LinkRateBps uint64
	// QueueBytes is the bottleneck's queue (default 12 ms at its rate).
	QueueBytes uint32
	// BackgroundRateBps is the background flood's rate (default twice the
	// bottleneck, so its queue stays full); BackgroundSize its datagram
	// payload (default 1400).
	BackgroundRateBps uint64
	BackgroundSize    int
	// BackgroundProto is "udp" (default: a flood at BackgroundRateBps) or
	// "tcp" (one unpaced TCP stream, which fills the queue by itself).
	BackgroundProto string
	// BackgroundMarking is the background flows' mark (default none; the
	// QoS study marked the background higher than the foreground).
	BackgroundMarking Marking
	// BackgroundFlows is the number of background flows from the sending
	// pod (default 1): UDP flows sharing BackgroundRateBps equally, each a
	// task of its own, or the streams of one unpaced TCP task.
	BackgroundFlows int
	// HistBinWidth and HistBins make the foreground's one-way latency
	// histogram (default 100 µs × 300; the QoS study's is 5 µs × 200).
	HistBinWidth time.Duration
	HistBins     int
	// ForegroundPPS and ForegroundSize shape the foreground flow (default
	// 100 datagrams/s of 100 bytes, as in the seed study).
	ForegroundPPS  int
	ForegroundSize int
	// Offload is the udp flows' --offload: "auto" by default. The
	// background flood must reach twice the bottleneck's rate to keep its
	// queue full, which one datagram per sendmmsg entry does not on the
	// lab's 2 CPUs (measured: with "off" the FIFO bottleneck built no
	// queue, p99 0.09 ms); the foreground flow (100 datagrams/s) is never
	// batched at its rate. With "auto" the bottleneck dequeues up to 64 KB
	// GSO batches, so a high-class datagram can wait behind one batch
	// (0.5 ms at 1 Gbit/s): "off" for real datagrams (see docs/probes.md).
	Offload string
	// PingInterval is the marked ping's interval (default 10 ms).
	PingInterval time.Duration
	// Time is each cell's length (default 5 s). The background runs a
	// second longer, so it covers the whole foreground flow; its excess
	// fills the bottleneck's queue within milliseconds.
	Time time.Duration
}

// withDefaults fills unset options.
func (o Options) withDefaults() Options {
	if o.Offload == "" {
		o.Offload = probe.OffloadAuto
	}
	if len(o.Variants) == 0 {
		o.Variants = Variants
	}
	if len(o.Placements) == 0 {
		o.Placements = []string{PlacementCrossNode}
	}
	if len(o.Markings) == 0 {
		o.Markings = DefaultMarkings()
	}
	if o.HighDSCP == nil {
		o.HighDSCP = DefaultHighDSCP
	}
	if o.BottleneckRateBps == 0 {
		o.BottleneckRateBps = 1e9
	}
	if o.BackgroundRateBps == 0 {
		o.BackgroundRateBps = 2 * o.BottleneckRateBps
	}
	if o.BackgroundSize == 0 {
		o.BackgroundSize = 1400
	}
	if o.BackgroundProto == "" {
		o.BackgroundProto = "udp"
	}
	if o.BackgroundFlows == 0 {
		o.BackgroundFlows = 1
	}
	if o.HistBinWidth == 0 {
		o.HistBinWidth = DefaultHistBinWidth
	}
	if o.HistBins == 0 {
		o.HistBins = DefaultHistBins
	}
	if o.ForegroundPPS == 0 {
		o.ForegroundPPS = 100
	}
	if o.ForegroundSize == 0 {
		o.ForegroundSize = 100
	}
	if o.PingInterval == 0 {
		o.PingInterval = 10 * time.Millisecond
	}
	if o.Time == 0 {
		o.Time = 5 * time.Second
	}
	return o
}

// Validate checks the options (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	seen := map[string]bool{}
	for _, v := range o.Variants {
		if !slices.Contains(Variants, v) {
			errs = append(errs, fmt.Errorf("variant %q: want one of %s", v, strings.Join(Variants, ", ")))
		}
		if seen[v] {
			errs = append(errs, fmt.Errorf("variant %q given twice", v))
		}
		seen[v] = true
	}
	seenP := map[string]bool{}
	for _, p := range o.Placements {
		if _, ok := placementConnection[p]; !ok {
			errs = append(errs, fmt.Errorf("placement %q: want %s or %s", p, PlacementSameNode, PlacementCrossNode))
		}
		if seenP[p] {
			errs = append(errs, fmt.Errorf("placement %q given twice", p))
		}
		seenP[p] = true
	}
	tos := map[int]bool{}
	for _, m := range o.Markings {
		if m.TOS < 0 || m.TOS > 255 {
			errs = append(errs, fmt.Errorf("marking %s: TOS %d is outside 0-255", m.Name, m.TOS))
		}
		if tos[m.TOS] {
			errs = append(errs, fmt.Errorf("marking %s given twice", m.Name))
		}
		tos[m.TOS] = true
	}
	for _, d := range o.HighDSCP {
		if d < 0 || d > 63 {
			errs = append(errs, fmt.Errorf("high-priority DSCP %d is outside 0-63", d))
		}
	}
	if o.LinkRateBps != 0 && o.BottleneckRateBps > o.LinkRateBps {
		errs = append(errs, fmt.Errorf("bottleneck rate %s is above the link's rate %s: the bottleneck would never hold a queue",
			qosspec.FormatBps(o.BottleneckRateBps), qosspec.FormatBps(o.LinkRateBps)))
	}
	if o.BottleneckRateBps < 1e6 {
		errs = append(errs, fmt.Errorf("bottleneck rate %d bit/s: want at least 1 Mbit/s", o.BottleneckRateBps))
	}
	if o.ForegroundPPS < 1 || o.ForegroundPPS > 100_000 {
		errs = append(errs, fmt.Errorf("foreground rate %d pps: want 1-100000", o.ForegroundPPS))
	}
	if o.ForegroundSize < 64 || o.ForegroundSize > 1400 {
		errs = append(errs, fmt.Errorf("foreground size %d: want 64-1400 bytes", o.ForegroundSize))
	}
	if o.BackgroundProto != "udp" && o.BackgroundProto != "tcp" {
		errs = append(errs, fmt.Errorf("background %q: want udp or tcp", o.BackgroundProto))
	}
	if o.BackgroundMarking.TOS < 0 || o.BackgroundMarking.TOS > 255 {
		errs = append(errs, fmt.Errorf("background marking %s: TOS %d is outside 0-255", o.BackgroundMarking.Name, o.BackgroundMarking.TOS))
	}
	// Every flow of a phase's sender is a task of the sending pod's agent,
	// which runs AgentSlots at once: the UDP background flows and the
	// foregrounds of the largest marking group must fit.
	fg := 0
	for _, g := range markingGroups(o.Markings) {
		fg = max(fg, len(g))
	}
	switch {
	case o.BackgroundFlows < 1 || o.BackgroundFlows > 64:
		errs = append(errs, fmt.Errorf("background flows %d: want 1-64", o.BackgroundFlows))
	case o.BackgroundProto == "udp" && o.BackgroundFlows+fg > AgentSlots:
		errs = append(errs, fmt.Errorf("background flows %d: beside %d foreground flows the sending pod would run %d tasks at once, more than an agent's %d; "+
			"at most %d UDP background flows (or background=tcp, whose flows are the streams of one task)", o.BackgroundFlows, fg, o.BackgroundFlows+fg, AgentSlots, AgentSlots-fg))
	}
	if o.HistBinWidth < time.Microsecond || o.HistBinWidth > 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("histogram bin %v: want 1us to 10ms", o.HistBinWidth))
	}
	if o.HistBins < 1 || o.HistBins > 100_000 {
		errs = append(errs, fmt.Errorf("histogram bins %d: want 1-100000", o.HistBins))
	}
	if o.BackgroundSize < 64 || o.BackgroundSize > 65000 {
		errs = append(errs, fmt.Errorf("background size %d: want 64-65000 bytes", o.BackgroundSize))
	}
	if o.Time < 500*time.Millisecond || o.Time > 10*time.Minute {
		errs = append(errs, fmt.Errorf("time %v: want 500ms to 10m", o.Time))
	}
	if o.PingInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("ping interval %v: want at least 1ms", o.PingInterval))
	}
	return errors.Join(errs...)
}

// Paths a variant needs between the nodes (VariantSetup.Path).
const (
	PathAny   = ""               // any path
	PathPlain = "plain"          // no encapsulation (the bottleneck variants)
	PathVXLAN = suite.EncapVXLAN // a VXLAN overlay
)

// VariantSetup is what one variant needs from the cluster: the path,
// and the set-ups on the sending node's uplink (where the bottleneck is)
// and on the sending pod's eth0.
type VariantSetup struct {
	Variant         string
	Path            string // PathAny, PathPlain or PathVXLAN
	VXLANInheritTOS bool
	Uplink          *qosspec.Spec // nil: none
	PodEth0         *qosspec.Spec // nil: none
}

// SetupFor returns what variant v needs.
func (o Options) SetupFor(v string) (VariantSetup, error) {
	o = o.withDefaults()
	fifo := &qosspec.Spec{Setup: qosspec.SpecBottleneck, RateBps: o.BottleneckRateBps, QueueBytes: o.QueueBytes}
	leaf := o.QueueBytes
	if leaf == 0 {
		leaf = bottleneckQueue(o.BottleneckRateBps)
	}
	htb := &qosspec.Spec{Setup: qosspec.SpecHTBPriority, RateBps: o.BottleneckRateBps, DSCP: o.HighDSCP, Leaf: &qosspec.QueueLimit{Bytes: leaf}}
	s := VariantSetup{Variant: v, Path: PathPlain}
	switch v {
	case VariantAsIs:
		s.Path = PathAny
	case VariantPodHTB:
		s.Path, s.PodEth0 = PathAny, htb
	case VariantNodeHTB:
		s.Path, s.Uplink = PathAny, htb
	case VariantNone:
	case VariantFIFO:
		s.Uplink = fifo
	case VariantPfifoFast:
		s.PodEth0 = &qosspec.Spec{Setup: qosspec.SpecPfifoFast}
	case VariantHTBPriority:
		s.Uplink = htb
	case VariantVXLAN, VariantVXLANInherit:
		s.Path, s.VXLANInheritTOS, s.Uplink = PathVXLAN, v == VariantVXLANInherit, htb
	default:
		return s, fmt.Errorf("variant %q: want one of %s", v, strings.Join(Variants, ", "))
	}
	return s, nil
}

// Changes are what the variant asks of the environment for the pair p:
// tos inherit on both nodes' VTEPs, then the uplink's and the pod's
// set-ups; they are undone in reverse.
func (s VariantSetup) Changes(p suite.Pair) []suite.Change {
	var out []suite.Change
	if s.VXLANInheritTOS {
		for _, node := range []string{p.Src.Node, p.Dst.Node} {
			out = append(out, suite.Change{What: suite.CapVXLANTOS, Member: node})
		}
	}
	if s.Uplink != nil {
		out = append(out, suite.Change{What: suite.CapNodeQdisc, Member: p.Src.Node, QoS: s.Uplink})
	}
	if s.PodEth0 != nil {
		out = append(out, suite.Change{What: suite.CapPodQdisc, Member: p.Src.Name, QoS: s.PodEth0})
	}
	return out
}

// OnPath reports whether the variant's set-up lies on the path of the
// placement: traffic between two pods of one node never crosses the
// node's uplink or a VXLAN device.
func (s VariantSetup) OnPath(placement string) bool {
	return placement != PlacementSameNode || (s.Uplink == nil && !s.VXLANInheritTOS && s.Path != PathVXLAN)
}

// bottleneckQueue is the default queue: 12 ms at the rate, at least 64 KiB
// (1.5 MB at 1 Gbit/s, as the measured FIFO).
func bottleneckQueue(rate uint64) uint32 {
	return uint32(max(rate/8*12/1000, 64*1024))
}
