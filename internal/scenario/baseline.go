package scenario

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Connections, named as in the source study.
const (
	PodPodSameNode  = "pod-pod same node"
	PodPodCrossNode = "pod-pod cross node"
	NodeNode        = "node-node"
)

// ConnectionOrder is the order rows are shown in.
var ConnectionOrder = []string{PodPodSameNode, PodPodCrossNode, NodeNode}

// Measurements of the baseline.
const (
	MeasureTCP  = "tcp"
	MeasureUDP  = "udp"
	MeasureRR   = "rr"
	MeasurePing = "ping"
)

// Endpoint is an agent a suite can measure from or to.
type Endpoint struct {
	ID            string `json:"id"`   // the agent's pod uid
	Name          string `json:"name"` // pod name
	Node          string `json:"node"`
	IP            string `json:"ip"`
	ResponderAddr string `json:"responder_addr"` // HOST:PORT of its cnperf responder
	HostNetwork   bool   `json:"host_network"`
}

// BaselineOptions tune the baseline.
type BaselineOptions struct {
	Time       time.Duration // per throughput and rr measurement
	Repeat     int           // repetitions of each measurement
	UDPRateBps uint64        // UDP probe rate: below the path's capacity
	UDPSize    int           // UDP payload bytes
	PingCount  int
	Backend    string // label carried into the rows
}

// DefaultBaseline returns the baseline's defaults.
func DefaultBaseline() BaselineOptions {
	return BaselineOptions{Time: 5 * time.Second, Repeat: 3, UDPRateBps: 500e6, UDPSize: 1200, PingCount: 20}
}

// Validate checks the options.
func (o BaselineOptions) Validate() error {
	var errs []error
	if o.Time <= 0 {
		errs = append(errs, fmt.Errorf("time %v: must be positive", o.Time))
	}
	if o.Repeat < 1 || o.Repeat > 100 {
		errs = append(errs, fmt.Errorf("repeat %d: must be 1-100", o.Repeat))
	}
	if o.UDPRateBps == 0 {
		errs = append(errs, errors.New("udp rate: must be positive (the baseline measures loss below capacity)"))
	}
	if o.UDPSize < 64 || o.UDPSize > 65000 {
		errs = append(errs, fmt.Errorf("udp size %d: must be 64-65000", o.UDPSize))
	}
	if o.PingCount < 1 {
		errs = append(errs, fmt.Errorf("ping count %d: must be positive", o.PingCount))
	}
	return errors.Join(errs...)
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

// Baseline plans the baseline: for each connection and repetition, TCP
// throughput, UDP at a rate below capacity, UDP request/response and ping.
// Repetitions are interleaved (all connections once, then again) so slow
// drift of a shared machine spreads over every row alike. Every step is
// exclusive, so no measurement shares a node with another one: an RTT taken
// beside a throughput test on the same node would measure that test's
// queue, not the path.
func Baseline(eps []Endpoint, o BaselineOptions) ([]Step, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("baseline options: %w", err)
	}
	pairs, err := PickPairs(eps)
	if err != nil {
		return nil, err
	}
	var steps []Step
	for rep := 0; rep < o.Repeat; rep++ {
		for _, conn := range ConnectionOrder {
			p, ok := pairs[conn]
			if !ok {
				continue
			}
			for _, m := range []string{MeasureTCP, MeasureUDP, MeasureRR, MeasurePing} {
				steps = append(steps, Step{Connection: conn, Backend: o.Backend, Measure: m, Repeat: rep,
					Src: p.Src, Dst: p.Dst, Spec: baselineSpec(m, p.Dst, o), Exclusive: true})
			}
		}
	}
	return steps, nil
}

func baselineSpec(measure string, dst Endpoint, o BaselineOptions) probe.Spec {
	d := probe.Duration(o.Time)
	switch measure {
	case MeasureTCP:
		return probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr, Duration: d}
	case MeasureUDP:
		rate := o.UDPRateBps
		return probe.Spec{Kind: probe.KindUDP, Target: dst.ResponderAddr, Duration: d, RateBps: &rate, Size: o.UDPSize}
	case MeasureRR:
		return probe.Spec{Kind: probe.KindRR, Target: dst.ResponderAddr, Proto: "udp", Duration: d}
	default:
		return probe.Spec{Kind: probe.KindPing, Target: dst.IP, Count: o.PingCount, Interval: probe.Duration(10 * time.Millisecond)}
	}
}

// BaselineSuite is the baseline as a Suite: one phase measuring pod-pod on
// one node, pod-pod across nodes and node-node (TCP, UDP below capacity,
// request/response and ping). Settings (--set): udp-rate (bit/s, e.g.
// 500M), udp-size (bytes), ping-count.
type BaselineSuite struct{}

// Name implements Suite.
func (BaselineSuite) Name() string { return "baseline" }

// Describe implements Suite.
func (BaselineSuite) Describe() string {
	return "pod-pod same node, pod-pod cross node, node-node: TCP and UDP throughput, loss, RTT"
}

// Plan implements Suite.
func (s BaselineSuite) Plan(agents []Endpoint, o Options, _ Network) ([]Phase, error) {
	bo, err := baselineOptions(s.Name(), o)
	if err != nil {
		return nil, err
	}
	steps, err := Baseline(agents, bo)
	if err != nil {
		return nil, err
	}
	name := s.Name()
	if o.Backend != "" {
		name += " on " + o.Backend
	}
	return []Phase{{Name: name, Steps: steps}}, nil
}

// Rows implements Suite.
func (BaselineSuite) Rows(outcomes []Outcome) []Row { return Rows(outcomes) }

// baselineOptions turns the common options and the baseline's settings
// into BaselineOptions.
func baselineOptions(suite string, o Options) (BaselineOptions, error) {
	if err := o.Validate(); err != nil {
		return BaselineOptions{}, fmt.Errorf("suite %s: %w", suite, err)
	}
	if err := o.CheckSet(suite, "udp-rate", "udp-size", "ping-count"); err != nil {
		return BaselineOptions{}, err
	}
	bo := DefaultBaseline()
	bo.Time, bo.Repeat, bo.Backend = o.Time, o.Repeat, o.Backend
	for k, v := range o.Set {
		switch k {
		case "udp-rate":
			r, err := probe.ParseRate(v)
			if err != nil {
				return bo, fmt.Errorf("suite %s: udp-rate %q: %w", suite, v, err)
			}
			bo.UDPRateBps = r
		case "udp-size", "ping-count":
			n, err := strconv.Atoi(v)
			if err != nil {
				return bo, fmt.Errorf("suite %s: %s %q: want a whole number", suite, k, v)
			}
			if k == "udp-size" {
				bo.UDPSize = n
			} else {
				bo.PingCount = n
			}
		}
	}
	if err := bo.Validate(); err != nil {
		return bo, fmt.Errorf("suite %s: %w", suite, err)
	}
	return bo, nil
}
