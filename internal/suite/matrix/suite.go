// Package matrix is the suite that measures a whole cluster: for every
// ordered pair of nodes, TCP throughput, UDP loss at a set rate, the
// request/response round trip and ping, scheduled in rounds of disjoint
// pairs so no node is in two measurements at once (2(N-1) rounds for N
// nodes). Rows per pair, a summary per node against the cluster, and
// outliers flagged with the reason (beyond the median ± k MAD over all
// pairs).
package matrix

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "matrix"

// Labels of the rows.
const (
	LabelSrc = "src_node"
	LabelDst = "dst_node"
	// LabelPair names a pair row ("n1 → n3"), for notes.
	LabelPair = "pair"
	// LabelNode names a node summary row.
	LabelNode = "node"
	// LabelOutlier holds why a pair or node is an outlier ("" when not).
	LabelOutlier = "outlier"
	// LabelRound is the round a step ran in (1-based), kept on the steps.
	LabelRound = "round"
	// LabelCycle is the cycle of the pair plan a step ran in.
	LabelCycle = "cycle"
	// LabelConfirm marks a step that re-measures a suspect pair.
	LabelConfirm = "confirm"
	// LabelSuspect holds why a sampled pair looked like an outlier that
	// its re-measure did not confirm.
	LabelSuspect = "suspect"
	// labelPlan carries the plan's name on the steps, for Rows.
	labelPlan = "plan"
)

// Options tune the suite.
type Options struct {
	Time   time.Duration
	Repeat int
	// Endpoints are "pods" (a pod per node, the pod network; default) or
	// "hosts" (the host-network agents, the nodes' own network).
	Endpoints  string
	UDPRateBps uint64
	UDPSize    int
	PingCount  int
	// OutlierMADs is k in median ± k·MAD (default 3).
	OutlierMADs float64
	// Plan is pairplan.PlanAll or pairplan.PlanSample; Peers is k of the sample plan;
	// Cycle is the number of this run's first cycle and Cycles how many
	// it runs (0: the plan's window, so one run covers every pair).
	Plan          string
	Peers, Cycles int
	Cycle         int
	// Jitter bounds each pair's start delay in a round of the sample
	// and zones plans (Jitter); negative: the default (1s, plan=all 0).
	Jitter time.Duration
	// ZoneLabel is the node label plan=zones groups nodes by.
	ZoneLabel string
}

func (o Options) withDefaults() Options {
	if o.Endpoints == "" {
		o.Endpoints = "pods"
	}
	if o.UDPRateBps == 0 {
		o.UDPRateBps = 500e6
	}
	if o.UDPSize == 0 {
		o.UDPSize = 1200
	}
	if o.PingCount == 0 {
		o.PingCount = 10
	}
	if o.OutlierMADs == 0 {
		o.OutlierMADs = 3
	}
	if o.Plan == "" {
		o.Plan = pairplan.PlanAll
	}
	if o.Peers == 0 {
		o.Peers = 3
	}
	if o.Jitter < 0 {
		o.Jitter = 0
		if o.Plan != pairplan.PlanAll {
			o.Jitter = time.Second
		}
	}
	if o.ZoneLabel == "" {
		o.ZoneLabel = pairplan.DefaultZoneLabel
	}
	return o
}

// window is the number of cycles in which the plan covers the nodes of
// eps: every ordered pair (all, sample), every node representing its
// zone (zones).
func (o Options) window(eps []suite.Endpoint) int {
	switch o.Plan {
	case pairplan.PlanSample:
		return pairplan.Window(len(eps), o.Peers)
	case pairplan.PlanZones:
		z, _ := zonesOf(eps, o.ZoneLabel)
		return pairplan.ZoneWindow(z)
	}
	return 1
}

// zonesOf groups the endpoints by their node's label, or says which
// nodes lack it.
func zonesOf(eps []suite.Endpoint, label string) ([][]int, error) {
	names, zone := make([]string, len(eps)), make([]string, len(eps))
	var lacking []string
	for i, e := range eps {
		names[i] = e.Node
		v, ok := e.NodeLabel(label)
		if !ok || v == "" {
			lacking = append(lacking, e.Node)
		}
		zone[i] = v
	}
	if len(lacking) > 0 {
		if len(lacking) > 5 {
			lacking = append(lacking[:5], fmt.Sprintf("and %d more", len(lacking)-5))
		}
		return nil, fmt.Errorf("plan=zones: no label %s on node %s (--set zone-label= names another; a cluster's run reads the Node objects, a lab takes --zones N)",
			label, strings.Join(lacking, ", "))
	}
	return pairplan.Zones(names, zone), nil
}

// OptionsFrom reads the common options and the settings.
func OptionsFrom(o suite.Options) (Options, error) {
	m := Options{Time: o.Time, Repeat: o.Repeat, Jitter: -1}
	if err := o.Validate(); err != nil {
		return m, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	if err := Settings(&m).Apply(SuiteName, o); err != nil {
		return m, err
	}
	return m.withDefaults(), nil
}

// Suite is the node-pair matrix.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "every ordered node pair: TCP throughput, UDP loss, RR and ping, in rounds of disjoint pairs; per-node summary and outliers"
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// endpoints picks one agent per node (a pod, or the host-network agent),
// nodes in name order.
func endpoints(agents []suite.Endpoint, kind string) []suite.Endpoint {
	per := map[string]suite.Endpoint{}
	for _, e := range agents {
		if e.HostNetwork != (kind == "hosts") {
			continue
		}
		if cur, ok := per[e.Node]; !ok || e.Name < cur.Name {
			per[e.Node] = e
		}
	}
	var out []suite.Endpoint
	for _, e := range per {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b suite.Endpoint) int {
		if a.Node < b.Node {
			return -1
		}
		if a.Node > b.Node {
			return 1
		}
		return 0
	})
	return out
}

// Plan implements suite.Suite: the first cycle of the pair plan, per
// repetition one phase per round, each pair of the round measuring TCP,
// UDP, RR and ping one after another (all exclusive, so the server also
// keeps a node to one measurement at a time). Follow plans the later
// cycles.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, _ suite.Caps) ([]suite.Phase, error) {
	m, eps, err := s.prepare(agents, o)
	if err != nil {
		return nil, err
	}
	return s.cycle(eps, o, m, m.Cycle, nil), nil
}

func (s Suite) prepare(agents []suite.Endpoint, o suite.Options) (Options, []suite.Endpoint, error) {
	m, err := OptionsFrom(o)
	if err != nil {
		return m, nil, err
	}
	eps := endpoints(agents, m.Endpoints)
	if len(eps) < 2 {
		return m, nil, fmt.Errorf("suite %s: needs %s on at least two nodes (found %d)", s.Name(), m.Endpoints, len(eps))
	}
	if m.Plan == pairplan.PlanZones {
		if _, err := zonesOf(eps, m.ZoneLabel); err != nil {
			return m, nil, fmt.Errorf("suite %s: %w", s.Name(), err)
		}
	}
	if m.Cycles == 0 {
		m.Cycles = m.window(eps)
	}
	return m, eps, nil
}

// Announce implements suite.Announcer: the plan stated before the run.
func (s Suite) Announce(agents []suite.Endpoint, o suite.Options) string {
	m, eps, err := s.prepare(agents, o)
	if err != nil {
		return ""
	}
	st := Statement(m.Plan, len(eps), m.Peers, m.Cycles, m.Cycle)
	if m.Plan == pairplan.PlanZones {
		z, _ := zonesOf(eps, m.ZoneLabel)
		st = ZoneStatement(m.ZoneLabel, z, m.Cycles, m.Cycle)
	}
	if m.Jitter > 0 {
		st += fmt.Sprintf("; each pair starts 0-%v late (by cycle and pair)", m.Jitter)
	}
	return st + timing(o, len(eps))
}

// cycle plans cycle c: its pairs in rounds (none when c is past the
// run's cycles), then the re-measures of the suspects in rounds of their
// own.
func (s Suite) cycle(eps []suite.Endpoint, o suite.Options, m Options, c int, suspects [][2]int) []suite.Phase {
	var rounds [][][2]int
	if c < m.Cycle+m.Cycles {
		switch m.Plan {
		case pairplan.PlanSample:
			names := make([]string, len(eps))
			for i, e := range eps {
				names[i] = e.Node
			}
			rounds = SampleRounds(pairplan.Ring(names), m.Peers, c)
		case pairplan.PlanZones:
			z, _ := zonesOf(eps, m.ZoneLabel) // checked in prepare
			rounds = ZoneRounds(z, c)
		default:
			rounds = Rounds(len(eps))
		}
	}
	plain := len(rounds)
	rounds = append(rounds, Pack(suspects)...)
	conn := suite.PodPodCrossNode
	if m.Endpoints == "hosts" {
		conn = suite.NodeNode
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		for ri, round := range rounds {
			var steps []suite.Step
			for _, p := range round {
				src, dst := eps[p[0]], eps[p[1]]
				labels := map[string]string{LabelSrc: src.Node, LabelDst: dst.Node, LabelRound: strconv.Itoa(ri + 1),
					LabelCycle: strconv.Itoa(c), labelPlan: m.Plan, labelMADs: strconv.FormatFloat(m.OutlierMADs, 'g', -1, 64)}
				if ri >= plain {
					labels[LabelConfirm] = "1"
				}
				for i, measure := range measures {
					sp := spec(measure, dst, m)
					if i == 0 { // the pair's later measurements follow its first
						sp.StartDelay = probe.Duration(Jitter(m.Jitter, c, src.Node, dst.Node))
					}
					steps = append(steps, suite.Step{Connection: conn, Backend: o.Backend, Measure: measure, Repeat: rep,
						Src: src, Dst: dst, Spec: sp, Exclusive: true, Labels: maps.Clone(labels)})
				}
			}
			what := fmt.Sprintf("round %d of %d", ri+1, plain)
			if ri >= plain {
				what = fmt.Sprintf("re-measure %d of %d", ri+1-plain, len(rounds)-plain)
			}
			phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s cycle %d %s (%d pairs), #%d", s.Name(), c, what, len(round), rep+1), Steps: steps})
		}
	}
	return phases
}

// Follow implements suite.Follower: after a cycle, the next one (while
// the run has cycles left), with the pairs the last cycle found to be
// outliers (of the sample plan) measured again to confirm them. done is
// in the order run (the Runner's); Follow reads only its last cycle.
func (s Suite) Follow(agents []suite.Endpoint, o suite.Options, _ suite.Caps, done []suite.Outcome) ([]suite.Phase, error) {
	m, eps, err := s.prepare(agents, o)
	if err != nil {
		return nil, err
	}
	last, own := lastCycle(done, m.Cycle)
	next := last + 1
	var suspects [][2]int
	if m.Plan != pairplan.PlanAll {
		at := make(map[string]int, len(eps))
		for i, e := range eps {
			at[e.Node] = i
		}
		for _, p := range suspectsOf(own, m.OutlierMADs) {
			a, okA := at[p[0]]
			b, okB := at[p[1]]
			if okA && okB {
				suspects = append(suspects, [2]int{a, b})
			}
		}
	}
	if next >= m.Cycle+m.Cycles && len(suspects) == 0 {
		return nil, nil
	}
	return s.cycle(eps, o, m, next, suspects), nil
}

func spec(measure string, dst suite.Endpoint, m Options) probe.Spec {
	d := probe.Duration(m.Time)
	switch measure {
	case suite.MeasureTCP:
		return probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr, Duration: d}
	case suite.MeasureUDP:
		rate := m.UDPRateBps
		return probe.Spec{Kind: probe.KindUDP, Target: dst.ResponderAddr, Duration: d, RateBps: &rate, Size: m.UDPSize}
	case suite.MeasureRR:
		return probe.Spec{Kind: probe.KindRR, Target: dst.ResponderAddr, Proto: "udp", Duration: probe.Duration(min(m.Time, time.Second))}
	}
	return probe.Spec{Kind: probe.KindPing, Target: dst.IP, Count: m.PingCount, Interval: probe.Duration(10 * time.Millisecond)}
}
