// Package baseline is the suite of the source study's Table 2: pod-pod on
// one node, pod-pod across nodes and node-node, each measured with TCP
// throughput, UDP below capacity, UDP request/response and ping (and, with
// --set stamp=true, a STAMP test), the repetitions interleaved; and, where
// the environment can make a Service (suite.CapService), pod-service: the
// cross-node pair again through a ClusterIP-style Service in front of the
// destination pod (TCP, UDP, request/response; a ClusterIP answers no
// ping). Its rows are the framework's connection rows (suite.Rows) with
// each pod path's overhead against node-node, and the Service's against
// pod-pod cross node.
package baseline

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Options tune the baseline.
type Options struct {
	Time       time.Duration // per throughput and rr measurement
	Repeat     int           // repetitions of each measurement
	UDPRateBps uint64        // UDP probe rate: below the path's capacity
	UDPSize    int           // UDP payload bytes
	PingCount  int
	// Stamp adds a STAMP test (StampCount packets StampInterval apart,
	// DSCP EF) to the destination's responder on every connection.
	Stamp      bool
	StampCount int
	// Service adds the pod-service connection (the cross-node pair
	// through a Service in front of the destination pod).
	Service bool
	// serviceAsked says the service setting was given: without it the
	// row is left out where the environment cannot make a Service.
	serviceAsked bool
	Backend      string // label carried into the rows
}

// StampInterval spaces the stamp step's test packets, as ping's.
const StampInterval = 10 * time.Millisecond

// StampDSCP marks the stamp step's test packets: EF, so the rows show
// whether a marking survives each direction.
const StampDSCP = 46

// Defaults returns the baseline's defaults.
func Defaults() Options {
	return Options{Time: 5 * time.Second, Repeat: 3, UDPRateBps: 500e6, UDPSize: 1200, PingCount: 20, StampCount: 100, Service: true}
}

// Validate checks the options.
func (o Options) Validate() error {
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
	if o.Stamp && (o.StampCount < 1 || o.StampCount > 10000) {
		errs = append(errs, fmt.Errorf("stamp count %d: must be 1-10000", o.StampCount))
	}
	return errors.Join(errs...)
}

// Steps plans the baseline: for each connection and repetition, TCP
// throughput, UDP at a rate below capacity, UDP request/response and ping,
// and a STAMP test when o.Stamp is set; with o.Service, the cross-node
// pair again through a Service (steps marked Service: TCP, UDP, rr, and
// STAMP when set; no ping). Repetitions are interleaved (all connections once, then again) so slow
// drift of a shared machine spreads over every row alike. Every step is
// exclusive, so no measurement shares a node with another one: an RTT taken
// beside a throughput test on the same node would measure that test's
// queue, not the path.
func Steps(eps []suite.Endpoint, o Options) ([]suite.Step, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("baseline options: %w", err)
	}
	pairs, err := suite.PickPairs(eps)
	if err != nil {
		return nil, err
	}
	var steps []suite.Step
	for rep := 0; rep < o.Repeat; rep++ {
		for _, conn := range suite.ConnectionOrder {
			p, ok := pairs[conn]
			service := conn == suite.PodService
			if service {
				p, ok = pairs[suite.PodPodCrossNode]
				ok = ok && o.Service
			}
			if !ok {
				continue
			}
			measures := []string{suite.MeasureTCP, suite.MeasureUDP, suite.MeasureRR}
			if !service {
				measures = append(measures, suite.MeasurePing)
			}
			if o.Stamp {
				measures = append(measures, suite.MeasureStamp)
			}
			for _, m := range measures {
				steps = append(steps, suite.Step{Connection: conn, Backend: o.Backend, Measure: m, Repeat: rep,
					Src: p.Src, Dst: p.Dst, Spec: baselineSpec(m, p.Dst, o), Exclusive: true, Service: service})
			}
		}
	}
	return steps, nil
}

func baselineSpec(measure string, dst suite.Endpoint, o Options) probe.Spec {
	d := probe.Duration(o.Time)
	switch measure {
	case suite.MeasureTCP:
		return probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr, Duration: d}
	case suite.MeasureUDP:
		rate := o.UDPRateBps
		return probe.Spec{Kind: probe.KindUDP, Target: dst.ResponderAddr, Duration: d, RateBps: &rate, Size: o.UDPSize}
	case suite.MeasureRR:
		return probe.Spec{Kind: probe.KindRR, Target: dst.ResponderAddr, Proto: "udp", Duration: d}
	case suite.MeasureStamp:
		tos := StampDSCP << 2
		return probe.Spec{Kind: probe.KindStamp, Target: dst.ResponderAddr, Count: o.StampCount,
			Interval: probe.Duration(StampInterval), TOS: &tos}
	default:
		return probe.Spec{Kind: probe.KindPing, Target: dst.IP, Count: o.PingCount, Interval: probe.Duration(10 * time.Millisecond)}
	}
}

// Suite is the baseline as a suite.Suite: one phase measuring pod-pod on
// one node, pod-pod across nodes and node-node (TCP, UDP below capacity,
// request/response and ping), and pod-service where the environment can
// make a Service. Settings (--set): udp-rate (bit/s, e.g. 500M), udp-size
// (bytes), ping-count, stamp (true adds a STAMP test per connection;
// default false), stamp-count (test packets, default 100), service (false
// leaves pod-service out; true insists on it, so an environment without
// Services refuses the run; by default it is measured where the
// environment can make a Service).
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return "baseline" }

// Describe implements Suite.
func (Suite) Describe() string {
	return "pod-pod same node, pod-pod cross node, node-node, pod-service: TCP and UDP throughput, loss, RTT"
}

// Plan implements Suite.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	bo, err := OptionsFrom(s.Name(), o)
	if err != nil {
		return nil, err
	}
	name := s.Name()
	if o.Backend != "" {
		name += " on " + o.Backend
	}
	ph, err := PlanPhase(name, agents, bo, caps)
	if err != nil {
		return nil, err
	}
	return []suite.Phase{ph}, nil
}

// PlanPhase is the baseline's one phase, named name: its steps and, when
// it measures pod-service, the Service in front of the destination pod
// (a suite.CapService change). Unless the service setting was given, the
// pod-service row is left out where caps lack Services.
func PlanPhase(name string, agents []suite.Endpoint, bo Options, caps suite.Caps) (suite.Phase, error) {
	if !bo.serviceAsked && !caps.Has(suite.CapService) {
		bo.Service = false
	}
	steps, err := Steps(agents, bo)
	if err != nil {
		return suite.Phase{}, err
	}
	ph := suite.Phase{Name: name, Steps: steps}
	for _, st := range steps {
		if !st.Service {
			continue
		}
		_, port, err := net.SplitHostPort(st.Dst.ResponderAddr)
		n, _ := strconv.Atoi(port)
		if err != nil || n <= 0 {
			return ph, fmt.Errorf("pod-service: agent %s has no responder port (responder address %q)", st.Dst.Name, st.Dst.ResponderAddr)
		}
		ph.Changes = []suite.Change{{What: suite.CapService, Member: st.Dst.Name, Port: n}}
		break
	}
	return ph, nil
}

// suite.Rows implements Suite.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row { return suite.Rows(outcomes) }

// OptionsFrom turns the common options and the baseline's settings
// into Options.
func OptionsFrom(name string, o suite.Options) (Options, error) {
	if err := o.Validate(); err != nil {
		return Options{}, fmt.Errorf("suite %s: %w", name, err)
	}
	bo := Defaults()
	bo.Time, bo.Repeat, bo.Backend = o.Time, o.Repeat, o.Backend
	if err := Settings(&bo).Apply(name, o); err != nil {
		return bo, err
	}
	if err := bo.Validate(); err != nil {
		return bo, fmt.Errorf("suite %s: %w", name, err)
	}
	return bo, nil
}
