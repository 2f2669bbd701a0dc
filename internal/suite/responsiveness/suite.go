// Package responsiveness is the suite of latency under working load, as
// flent's RRUL test and IETF's "Responsiveness under Working Conditions"
// measure it: per path (pod-pod same node, pod-pod cross node, node-node,
// pod-service) a UDP request/response probe and a UDP one-way latency
// probe run first on the idle path, then again while saturating TCP
// streams run in both directions; queue watches on the host-network
// agents of both nodes sample their qdiscs' backlogs and loss counters
// meanwhile. Rows give idle and loaded round trips (p50, p99), the rise,
// round trips per minute (RPM: 60,000 over the trimmed mean of the round
// trips in ms, as the IETF draft computes it), the streams' throughput and
// a verdict naming where the queue was: the sending node's qdisc, the
// receiving node's, or the path (no qdisc held a backlog that explains the
// rise). With --set bottleneck=RATE a FIFO (tbf) at RATE sits on the
// sending node's uplink of every path between nodes, and the verdict
// compares the rise with the queue's own delay (its limit over its rate).
package responsiveness

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "responsiveness"

// Measures of the steps.
const (
	MeasureRR     = "rr"          // UDP request/response: the round trips
	MeasureUDP    = "udp"         // UDP one-way latency at a low rate
	MeasureStream = "stream"      // a saturating TCP stream (LabelDir: forward or back)
	MeasureQueue  = "queue-watch" // a queue watch on a node (LabelAt: sender or receiver)
)

// Labels of the steps and rows.
const (
	LabelLoad = "load" // LoadIdle or LoadLoaded (steps)
	LabelDir  = "dir"  // DirForward (source to destination) or DirBack (steps)
	LabelAt   = "at"   // AtSender or AtReceiver: whose node a watch sampled (steps)
	// LabelBottleneck describes the FIFO a path crosses ("100 Mbit/s
	// FIFO, 250000 B"), or "none"; LabelLimitBytes and LabelRateBps carry
	// its figures (steps and rows).
	LabelBottleneck = "bottleneck"
	LabelLimitBytes = "limit_bytes"
	LabelRateBps    = "limit_bps"
	// LabelQueueAt names where the loaded path's queue was (rows).
	LabelQueueAt = "queue_at"
	// LabelVerdict is the row's conclusion: where the queue was and, under
	// a bottleneck, the rise against the queue's delay (rows).
	LabelVerdict = "verdict"
)

// Values of the labels.
const (
	LoadIdle   = "idle"
	LoadLoaded = "loaded"
	DirForward = "forward"
	DirBack    = "back"
	AtSender   = "sender"
	AtReceiver = "receiver"
)

// Suite is the responsiveness suite.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "latency under working load per path: idle and loaded round trips, RPM, where the queue was"
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// lead is how long the loaded phase's streams run before the probes and
// watches start (the streams start, fill the queue, and agents fetch
// their tasks at slightly different moments); tail is how long they run
// after.
const (
	lead = 2 * time.Second
	tail = time.Second
)

// Plan implements suite.Suite: per repetition and path an idle phase (the
// probes alone) and a loaded phase (the probes beside streams both ways,
// and the watches).
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	c, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	paths := c.Paths
	if len(paths) == 0 {
		for _, p := range suite.ConnectionOrder {
			_, ok := pairs[p]
			if p == suite.PodService {
				_, ok = pairs[suite.PodPodCrossNode]
				ok = ok && caps.Has(suite.CapService)
			}
			if ok {
				paths = append(paths, p)
			}
		}
	}
	for _, p := range paths {
		src := p
		if p == suite.PodService {
			src = suite.PodPodCrossNode
			if !caps.Has(suite.CapService) {
				return nil, fmt.Errorf("suite %s: path %s needs to %s: %s", s.Name(), p, suite.CapService.Describe(), caps.Reason(suite.CapService))
			}
		}
		if _, ok := pairs[src]; !ok {
			return nil, fmt.Errorf("suite %s: path %s: the agents give no pair for it (see cnperf run baseline)", s.Name(), p)
		}
	}
	if c.BottleneckBps > 0 && !caps.Has(suite.CapNodeQdisc) {
		return nil, fmt.Errorf("suite %s: bottleneck needs to %s: %s", s.Name(), suite.CapNodeQdisc.Describe(), caps.Reason(suite.CapNodeQdisc))
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		for _, path := range paths {
			p := pairs[path]
			service := path == suite.PodService
			if service {
				p = pairs[suite.PodPodCrossNode]
			}
			var changes []suite.Change
			labels := map[string]string{LabelBottleneck: "none"}
			if c.BottleneckBps > 0 && p.Src.Node != p.Dst.Node {
				spec := &qosspec.Spec{Setup: qosspec.SpecBottleneck, RateBps: c.BottleneckBps, QueueBytes: c.queueBytes()}
				changes = append(changes, suite.Change{What: suite.CapNodeQdisc, Member: p.Src.Node, QoS: spec})
				labels[LabelBottleneck] = fmt.Sprintf("%s FIFO, %d B", qosspec.FormatBps(c.BottleneckBps), c.queueBytes())
				labels[LabelLimitBytes] = strconv.FormatUint(uint64(c.queueBytes()), 10)
				labels[LabelRateBps] = strconv.FormatUint(c.BottleneckBps, 10)
			}
			if service {
				_, port, err := net.SplitHostPort(p.Dst.ResponderAddr)
				n, _ := strconv.Atoi(port)
				if err != nil || n <= 0 {
					return nil, fmt.Errorf("suite %s: %s: agent %s has no responder port (responder address %q)", s.Name(), path, p.Dst.Name, p.Dst.ResponderAddr)
				}
				changes = append(changes, suite.Change{What: suite.CapService, Member: p.Dst.Name, Port: n})
			}
			b := builder{c: c, path: path, p: p, rep: rep, backend: o.Backend, service: service, labels: labels}
			phases = append(phases,
				suite.Phase{Name: fmt.Sprintf("%s %s idle, #%d", s.Name(), path, rep+1), Steps: b.probes(LoadIdle, 0), Changes: changes},
				suite.Phase{Name: fmt.Sprintf("%s %s loaded, #%d", s.Name(), path, rep+1), Concurrent: true,
					Steps: append(append(b.streams(), b.probes(LoadLoaded, lead)...), b.watches(agents)...), Changes: changes})
		}
	}
	return phases, nil
}

// builder makes one path's steps.
type builder struct {
	c       Options
	path    string
	p       suite.Pair
	rep     int
	backend string
	service bool
	labels  map[string]string
}

func (b builder) step(measure string, src, dst suite.Endpoint, spec probe.Spec, extra map[string]string, exclusive, service bool) suite.Step {
	labels := map[string]string{}
	for k, v := range b.labels {
		labels[k] = v
	}
	for k, v := range extra {
		labels[k] = v
	}
	return suite.Step{Connection: b.path, Backend: b.backend, Measure: measure, Repeat: b.rep, Src: src, Dst: dst,
		Spec: spec, Labels: labels, Exclusive: exclusive, Service: service}
}

// probes are the round-trip and one-way probes, starting after delay.
func (b builder) probes(load string, delay time.Duration) []suite.Step {
	d := probe.Duration(b.c.Time)
	rate := b.c.UDPRateBps
	rr := probe.Spec{Kind: probe.KindRR, Target: b.p.Dst.ResponderAddr, Proto: "udp", Duration: d, StartDelay: probe.Duration(delay),
		Interval: probe.Duration(rrInterval)}
	udp := probe.Spec{Kind: probe.KindUDP, Target: b.p.Dst.ResponderAddr, Duration: d, RateBps: &rate, Size: udpSize,
		StartDelay: probe.Duration(delay)}
	l := map[string]string{LabelLoad: load}
	return []suite.Step{
		b.step(MeasureRR, b.p.Src, b.p.Dst, rr, l, false, b.service),
		b.step(MeasureUDP, b.p.Src, b.p.Dst, udp, l, false, b.service),
	}
}

// rrInterval spaces the round trips, so they sample the path evenly in
// time: back to back, the fast ones of a moment without a queue would
// outnumber the slow ones behind it.
const rrInterval = 10 * time.Millisecond

// udpSize is the one-way probe's datagram payload: small, as a game's or
// a call's packets, so it measures the queue rather than adding to it.
const udpSize = 200

// streams are the saturating TCP streams: forward from the source, and
// back from the destination. Through a Service the source runs both (the
// back one reversed: the responder behind the Service sends); otherwise
// the destination's agent sends the back one, so no agent runs more than
// agent.DefaultMaxParallel (4) of a phase's tasks at once: a fifth would
// wait for the streams to end.
func (b builder) streams() []suite.Step {
	var out []suite.Step
	for _, dir := range []string{DirForward, DirBack} {
		src, dst, reverse := b.p.Src, b.p.Dst, false
		if dir == DirBack {
			if b.service {
				reverse = true
			} else {
				src, dst = b.p.Dst, b.p.Src
			}
		}
		spec := probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr, Duration: probe.Duration(lead + b.c.Time + tail),
			Streams: b.c.Streams, Congestion: b.c.congestion(), Reverse: reverse, Timeout: probe.Duration(5 * time.Second)}
		out = append(out, b.step(MeasureStream, src, dst, spec, map[string]string{LabelLoad: LoadLoaded, LabelDir: dir}, true, b.service))
	}
	return out
}

// watches are the queue watches on the host-network agents of the
// source's and the destination's node (one when they are the same node),
// over the probes' time; none where a node has no host-network agent.
func (b builder) watches(agents []suite.Endpoint) []suite.Step {
	host := func(node string) (suite.Endpoint, bool) {
		for _, a := range agents {
			if a.HostNetwork && a.Node == node {
				return a, true
			}
		}
		return suite.Endpoint{}, false
	}
	spec := func() probe.Spec {
		return probe.Spec{Kind: probe.KindQueue, Duration: probe.Duration(b.c.Time), StartDelay: probe.Duration(lead),
			Interval: probe.Duration(b.c.WatchInterval)}
	}
	var out []suite.Step
	srcHost, okS := host(b.p.Src.Node)
	dstHost, okD := host(b.p.Dst.Node)
	if okS {
		// Toward the destination: its node, or the pod on this node.
		peer := b.p.Dst
		if okD && b.p.Src.Node != b.p.Dst.Node {
			peer = dstHost
		}
		if peer.ID != srcHost.ID {
			out = append(out, b.step(MeasureQueue, srcHost, peer, spec(), map[string]string{LabelLoad: LoadLoaded, LabelAt: AtSender}, false, false))
		}
	}
	if okD && okS && b.p.Src.Node != b.p.Dst.Node {
		out = append(out, b.step(MeasureQueue, dstHost, srcHost, spec(), map[string]string{LabelLoad: LoadLoaded, LabelAt: AtReceiver}, false, false))
	}
	return out
}
