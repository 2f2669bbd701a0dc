package suite

import (
	"fmt"
	"sort"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// Connections, named as in the source study.
const (
	PodPodSameNode  = "pod-pod same node"
	PodPodCrossNode = "pod-pod cross node"
	NodeNode        = "node-node"
	// PodService is pod-pod cross node through a ClusterIP-style Service
	// in front of the destination pod (kube-proxy's DNAT on the way).
	PodService = "pod-service"
)

// ConnectionOrder is the order rows are shown in.
var ConnectionOrder = []string{PodPodSameNode, PodPodCrossNode, NodeNode, PodService}

// Measurements of the baseline.
const (
	MeasureTCP  = "tcp"
	MeasureUDP  = "udp"
	MeasureRR   = "rr"
	MeasurePing = "ping"
	// MeasureStamp is a STAMP test to the destination's responder (the
	// baseline's optional stamp step): round trip, one-way delay, loss
	// and DSCP per direction.
	MeasureStamp = "stamp"
)

// Endpoint is an agent a suite can measure from or to.
type Endpoint struct {
	ID            string `json:"id"`   // the agent's pod uid
	Name          string `json:"name"` // pod name
	Node          string `json:"node"`
	IP            string `json:"ip"`
	ResponderAddr string `json:"responder_addr"` // HOST:PORT of its cnperf responder
	HostNetwork   bool   `json:"host_network"`
	// NodeLabels are the node's labels where the environment knows them
	// (NodeLabeler; nil when it does not); not kept with the steps. A
	// pointer, so endpoints stay comparable.
	NodeLabels *NodeLabels `json:"-"`
}

// NodeLabels are a node's labels.
type NodeLabels map[string]string

// NodeLabel returns the label key of e's node, and whether it has it.
func (e Endpoint) NodeLabel(key string) (string, bool) {
	if e.NodeLabels == nil {
		return "", false
	}
	v, ok := (*e.NodeLabels)[key]
	return v, ok
}

// Step is one measurement of a suite.
type Step struct {
	Connection string     `json:"connection"`
	Backend    string     `json:"backend,omitempty"`
	Measure    string     `json:"measure"`
	Repeat     int        `json:"repeat"` // 0-based repetition
	Src        Endpoint   `json:"src"`
	Dst        Endpoint   `json:"dst"`
	Spec       probe.Spec `json:"spec"`
	// Exclusive steps must not share a node with another exclusive step.
	Exclusive bool `json:"exclusive"`
	// Labels carry what a suite groups its own rows by beyond the
	// connection (qos-priority's variant and marking).
	Labels map[string]string `json:"labels,omitempty"`
	// Applied says how the environment made the phase's changes where it
	// differs from what the suite asked (see Rewriter).
	Applied *Applied `json:"applied,omitempty"`
	// Service says the source reaches Dst's responder through a Service
	// in front of Dst (a CapService change of the phase on Dst); the
	// environment fills Via with the Service's address (see Rewriter).
	Service bool `json:"service,omitempty"`
	// Via is the address (IP:PORT) the source dials instead of Dst's
	// responder: the Service's, set by the environment.
	Via string `json:"via,omitempty"`
}

// Pair is the source and destination chosen for a connection.
type Pair struct{ Src, Dst Endpoint }

// PickPairs chooses one pair per connection from the agents: two pods on
// one node, pods on two nodes, and the host-network agents of two nodes.
// Nodes are taken in name order and the second of each pair sends to the
// first (node2 → node1, as the sources measured worker → controller). A
// connection without suitable agents is missing from the map; an error
// says why when none can be measured.
func PickPairs(eps []Endpoint) (map[string]Pair, error) {
	pods := map[string][]Endpoint{}
	hosts := map[string]Endpoint{}
	for _, e := range eps {
		if e.HostNetwork {
			if _, dup := hosts[e.Node]; !dup {
				hosts[e.Node] = e
			}
			continue
		}
		pods[e.Node] = append(pods[e.Node], e)
	}
	nodes := make([]string, 0, len(pods))
	for n := range pods {
		sort.Slice(pods[n], func(i, j int) bool { return pods[n][i].Name < pods[n][j].Name })
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	out := map[string]Pair{}
	for _, n := range nodes {
		if len(pods[n]) >= 2 {
			out[PodPodSameNode] = Pair{Src: pods[n][1], Dst: pods[n][0]}
			break
		}
	}
	if len(nodes) >= 2 {
		out[PodPodCrossNode] = Pair{Src: pods[nodes[1]][0], Dst: pods[nodes[0]][0]}
	}
	hostNodes := make([]string, 0, len(hosts))
	for n := range hosts {
		hostNodes = append(hostNodes, n)
	}
	sort.Strings(hostNodes)
	if len(hostNodes) >= 2 {
		out[NodeNode] = Pair{Src: hosts[hostNodes[1]], Dst: hosts[hostNodes[0]]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pair to measure among %d agents: need two pods on one node, pods on two nodes, or host-network agents on two nodes", len(eps))
	}
	return out, nil
}

// Task is the step as a run task: from the source agent to the
// destination agent (by pod uid), the spec without its target (the server
// fills it from the destination agent, or from Via), and the step's
// exclusivity.
func (s Step) Task() api.RunTask {
	sp := s.Spec
	sp.Target = ""
	excl := s.Exclusive
	return api.RunTask{Src: s.Src.ID, Dst: s.Dst.ID, Type: api.TypeProbe, Spec: &sp, Exclusive: &excl, Via: s.Via}
}

// Endpoints turns the server's agents into endpoints, leaving out offline
// ones, with the node labels the agents reported.
func Endpoints(agents []api.Agent) []Endpoint {
	var out []Endpoint
	for _, a := range agents {
		if a.Status == "offline" {
			continue
		}
		e := Endpoint{ID: a.PodUID, Name: a.PodName, Node: a.NodeName, IP: a.PodIP,
			ResponderAddr: a.ResponderAddr, HostNetwork: a.HostNetwork}
		if len(a.NodeLabels) > 0 {
			l := NodeLabels(a.NodeLabels)
			e.NodeLabels = &l
		}
		out = append(out, e)
	}
	return out
}
