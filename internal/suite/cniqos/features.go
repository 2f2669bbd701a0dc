// Package cniqos is the cni-qos suite: a CNI's own QoS features (pod
// annotations such as Calico's qos.projectcalico.org/*, Cilium's
// Bandwidth Manager and priority), applied to a test pod, measured with
// cnperf's probes and analyses, removed, and judged per feature and
// datapath mode: works, works with a caveat (the figure), no effect
// (where it stopped), or cannot be tried here (the kernel feature or CNI
// release it lacks, as detected). The features are data (Table); a CNI
// is supported by adding rows, not code.
package cniqos

import (
	"slices"
	"strconv"
)

// Classes of promise a feature makes; each is measured its own way.
const (
	// ClassBandwidth limits a pod's bit rate: a TCP flood through the
	// limited direction, its steady rate after conforming and its
	// overshoot (the shaping suite's analysis).
	ClassBandwidth = "bandwidth"
	// ClassPacketRate limits a pod's packet rate: a UDP flood of small
	// datagrams, the packets per second that arrive.
	ClassPacketRate = "packet-rate"
	// ClassDSCP marks a pod's traffic: the mark on arrival at an address
	// of the underlay (leaving the cluster) and at a pod (not leaving).
	ClassDSCP = "dscp"
	// ClassPriority puts a pod's traffic ahead of others' on the node:
	// its request/response latency while another pod floods the same
	// path, with and without the priority (qos-priority's EF under a
	// flood).
	ClassPriority = "priority"
	// ClassConnections limits the number of a pod's connections open at
	// once: twice the limit of TCP connects, held open (the connect
	// probe's Count), and how many were open at once.
	ClassConnections = "connections"
	// ClassTunnelMark is a pod's own DSCP mark carried across the CNI's
	// tunnel: a marked flow to a pod on another node, the mark on the
	// sending node's wire (outer and inner header) and on arrival. Where
	// the outer header loses it, a second row says what carries it
	// (suite.TunnelRemedies, with the nodes' metadata-mode devices as
	// read) and, with the allow-node-qdisc opt-in, tries the tunnel
	// device's tos inherit and says whether the outer header then
	// carries the mark.
	ClassTunnelMark = "tunnel-mark"
	// ClassNone is a CNI without QoS of its own (one row says so).
	ClassNone = "none"
)

// Directions of a limit, as the annotations name them.
const (
	DirEgress  = "egress"  // what the pod sends
	DirIngress = "ingress" // what the pod receives
)

// How a feature is asked for.
const (
	ViaAnnotation = "annotation" // pod annotations (Feature.Set)
	ViaResource   = "resource"   // a custom resource (Feature.Resource)
	ViaDatapath   = "datapath"   // nothing to ask: the datapath as the CNI made it
)

// A Feature is one QoS knob of a CNI, as data: how it is asked for, what
// it promises, what the node's kernel and the CNI's release must have.
type Feature struct {
	// CNI is the CNI's name as a cluster's facts name it.
	CNI string `json:"cni"`
	// Name names the row ("egressBandwidth").
	Name  string `json:"name"`
	Class string `json:"class"`
	// Direction is DirEgress or DirIngress for limits and marks.
	Direction string `json:"direction,omitempty"`
	// Via says how the feature is asked for: ViaAnnotation (Set) or
	// ViaResource (Resource).
	Via string `json:"via"`
	// Set are the pod annotations, values included, that ask for it.
	Set map[string]string `json:"set,omitempty"`
	// Resource names the resource that asks for it ("NetworkQoS
	// k8s.ovn.org/v1alpha1"); cnperf does not create resources yet.
	Resource string `json:"resource,omitempty"`
	// Promise says in words what the CNI promises.
	Promise string `json:"promise"`
	// Value is the promised figure: bit/s, packets/s, or a DSCP code
	// point.
	Value float64 `json:"value,omitempty"`
	// NeedsKernel are traffic-control features (qdiscs, actions) every
	// node's kernel must have, by the names kernel detection uses ("fq").
	NeedsKernel []string `json:"needs_kernel,omitempty"`
	// MinKernel is the oldest kernel release it works on ("6.7"; "" any).
	MinKernel string `json:"min_kernel,omitempty"`
	// From is the oldest release of the CNI known to have it ("" when no
	// release has it yet; Ref names where it is discussed).
	From string `json:"from"`
	// Needs names a setting of the CNI it needs beyond the annotation.
	Needs string `json:"needs,omitempty"`
	// Ref is where the CNI documents or discusses it.
	Ref string `json:"ref,omitempty"`
}

// The figures the table asks for: measurable on a shared 2-core machine
// (a limit well below what a pod pair reaches, a packet rate well below
// what a UDP flood of small datagrams offers).
const (
	bandwidthLimit  = 100e6 // bit/s
	packetRateLimit = 1000  // packets/s
	connLimit       = 10    // connections open at once
	// packetBurst is the packet-rate limit's bucket. Calico's default,
	// 5 packets, refills in 5 ms: a flood that reaches the node in
	// bursts further apart (a sender or softirq held up on a busy
	// machine) loses the tokens between them and gets 20-30 % less than
	// the limit. 100 packets cover 100 ms of such gaps and add at most
	// 100 packets to a run (1.25 % of an 8 s one).
	packetBurst = 100
	dscpAF41    = 34
	dscpEF      = 46
)

const (
	calicoDocs = "docs.tigera.io/calico/latest/networking/configuring/qos-controls"
	// calicoChecked is the Calico release the annotations were checked
	// against (libcalico-go's annotation names; DSCP is new in it).
	calicoChecked = "v3.31.0"
	ciliumChecked = "v1.20.2"
)

// Table holds every CNI's QoS features this suite knows. Each fact about
// a feature is here and nowhere else.
var Table = []Feature{
	{CNI: "calico", Name: "egressBandwidth", Class: ClassBandwidth, Direction: DirEgress, Via: ViaAnnotation,
		Set:     map[string]string{"qos.projectcalico.org/egressBandwidth": "100M"},
		Promise: "what the pod sends is limited to 100 Mbit/s (tbf on an ifb; default burst 4 Gibit)", Value: bandwidthLimit,
		NeedsKernel: []string{"tbf", "ingress", "mirred"}, From: calicoChecked, Ref: calicoDocs},
	{CNI: "calico", Name: "ingressBandwidth", Class: ClassBandwidth, Direction: DirIngress, Via: ViaAnnotation,
		Set:     map[string]string{"qos.projectcalico.org/ingressBandwidth": "100M"},
		Promise: "what the pod receives is limited to 100 Mbit/s (tbf on its veth; default burst 4 Gibit)", Value: bandwidthLimit,
		NeedsKernel: []string{"tbf"}, From: calicoChecked, Ref: calicoDocs},
	{CNI: "calico", Name: "egressPacketRate", Class: ClassPacketRate, Direction: DirEgress, Via: ViaAnnotation,
		Set: map[string]string{"qos.projectcalico.org/egressPacketRate": strconv.Itoa(packetRateLimit),
			"qos.projectcalico.org/egressPacketBurst": strconv.Itoa(packetBurst)},
		Promise: "the pod sends at most 1000 packets/s (a netfilter limit, its bucket 100 packets; the rest dropped)", Value: packetRateLimit,
		From: calicoChecked, Ref: calicoDocs},
	{CNI: "calico", Name: "ingressPacketRate", Class: ClassPacketRate, Direction: DirIngress, Via: ViaAnnotation,
		Set: map[string]string{"qos.projectcalico.org/ingressPacketRate": strconv.Itoa(packetRateLimit),
			"qos.projectcalico.org/ingressPacketBurst": strconv.Itoa(packetBurst)},
		Promise: "the pod receives at most 1000 packets/s (its bucket 100 packets)", Value: packetRateLimit,
		From: calicoChecked, Ref: calicoDocs},
	{CNI: "calico", Name: "dscp", Class: ClassDSCP, Direction: DirEgress, Via: ViaAnnotation,
		Set:     map[string]string{"qos.projectcalico.org/dscp": "AF41"},
		Promise: "the pod's traffic leaving the cluster carries AF41 (34); traffic to pods is not marked", Value: dscpAF41,
		From: calicoChecked, Ref: "calico#10718"},
	{CNI: "calico", Name: "egressMaxConnections", Class: ClassConnections, Direction: DirEgress, Via: ViaAnnotation,
		Set:     map[string]string{"qos.projectcalico.org/egressMaxConnections": strconv.Itoa(connLimit)},
		Promise: "the pod has at most 10 TCP connections open at once (connlimit; a SYN past it is reset)", Value: connLimit, From: calicoChecked, Ref: calicoDocs},

	{CNI: "cilium", Name: "bandwidth-manager", Class: ClassBandwidth, Direction: DirEgress, Via: ViaAnnotation,
		Set:     map[string]string{"kubernetes.io/egress-bandwidth": "100M"},
		Promise: "what the pod sends is paced to 100 Mbit/s (EDT in BPF, fq on the node's devices)", Value: bandwidthLimit,
		NeedsKernel: []string{"fq"}, From: ciliumChecked, Needs: "--enable-bandwidth-manager", Ref: "docs.cilium.io: bandwidth-manager"},
	{CNI: "cilium", Name: "priority", Class: ClassPriority, Direction: DirEgress, Via: ViaAnnotation,
		Set:         map[string]string{"bandwidth.cilium.io/priority": "1"},
		Promise:     "the pod's traffic leaves the node ahead of other pods' (fq priority bands)",
		NeedsKernel: []string{"fq"}, MinKernel: "6.7", From: ciliumChecked, Needs: "--enable-bandwidth-manager", Ref: "cilium#36025"},
	{CNI: "cilium", Name: "bandwidth-plugin", Class: ClassBandwidth, Direction: DirEgress, Via: ViaAnnotation,
		Set:     map[string]string{"kubernetes.io/egress-bandwidth": "100M"},
		Promise: "what the pod sends is limited to 100 Mbit/s by the chained CNI bandwidth plugin (Bandwidth Manager off)", Value: bandwidthLimit,
		NeedsKernel: []string{"tbf", "ingress", "mirred"}, From: ciliumChecked, Needs: "the bandwidth plugin chained in the CNI configuration"},
	{CNI: "cilium", Name: "egress-dscp", Class: ClassDSCP, Direction: DirEgress, Via: ViaAnnotation,
		Promise: "the pod's egress carries a DSCP (the tunnel's outer header left unmarked)", From: "", Ref: "cilium PR #45915"},

	{CNI: "flannel", Name: "none", Class: ClassNone,
		Promise: "no QoS of its own; a chained CNI bandwidth plugin honours kubernetes.io/*-bandwidth (the shaping suite measures it)"},

	// A pod's own mark across each CNI's tunnel; what carries it where
	// the tunnel loses it is suite.TunnelRemedies.
	{CNI: "calico", Name: "tunnel-mark", Class: ClassTunnelMark, Direction: DirEgress, Via: ViaDatapath, Value: dscpEF, From: calicoChecked,
		Promise: "a pod's own DSCP mark (EF) reaches the other node, on the VXLAN outer header too"},
	{CNI: "cilium", Name: "tunnel-mark", Class: ClassTunnelMark, Direction: DirEgress, Via: ViaDatapath, Value: dscpEF, From: ciliumChecked,
		Promise: "a pod's own DSCP mark (EF) reaches the other node, on the VXLAN outer header too"},
	{CNI: "flannel", Name: "tunnel-mark", Class: ClassTunnelMark, Direction: DirEgress, Via: ViaDatapath, Value: dscpEF, From: "v0.28.10",
		Promise: "a pod's own DSCP mark (EF) reaches the other node, on the VXLAN outer header too"},

	{CNI: "ovn-kubernetes", Name: "NetworkQoS", Class: ClassDSCP, Direction: DirEgress, Via: ViaResource,
		Resource: "NetworkQoS k8s.ovn.org/v1alpha1", Promise: "selected pods' egress carries a DSCP and a rate limit (its tunnel does not inherit the mark by default)",
		NeedsKernel: []string{"openvswitch"}, From: "v1.1.0", Ref: "ovn-kubernetes#5171"},
	{CNI: "antrea", Name: "Egress bandwidth", Class: ClassBandwidth, Direction: DirEgress, Via: ViaResource,
		Resource: "Egress crd.antrea.io/v1beta1 (spec.bandwidth)", Promise: "traffic through an Egress IP is limited to spec.bandwidth.rate (100 Mbit/s asked)", Value: bandwidthLimit,
		NeedsKernel: []string{"openvswitch"}, From: "v1.14.0", Ref: "antrea.io/docs: egress"},
}

// For returns the features of the CNI named, in the table's order.
func For(cni string) []Feature {
	var out []Feature
	for _, f := range Table {
		if f.CNI == cni {
			out = append(out, f)
		}
	}
	return out
}

// CNIs lists the CNIs the table knows, in its order.
func CNIs() []string {
	var out []string
	for _, f := range Table {
		if !slices.Contains(out, f.CNI) {
			out = append(out, f.CNI)
		}
	}
	return out
}
