// Package shaping is the suite of pod bandwidth limits as the CNI bandwidth
// plugin sets them (tbf at the pod's veth, ingress via ifb): the receiver's
// rate per 100 ms of TCP and UDP below, at and above the limit, its steady
// state against the goodput the limit allows, the first interval's
// overshoot and the time to conform. Its flows, rows and table serve the
// policing suite too.
package shaping

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Shaping directions: a pod's egress (traffic it sends) and ingress
// (traffic it receives), as the bandwidth annotations name them.
const (
	DirEgress  = "egress"
	DirIngress = "ingress"
)

// Offered loads relative to the limit.
const (
	LoadBelow = "below"
	LoadAt    = "at"
	LoadAbove = "above"
	// LoadFlood offers 100 times the limit: the thesis's failing policing
	// case (1 Mbit/s limit, 100 Mbit/s offered).
	LoadFlood = "flood"
)

// LoadFactor is the offered rate over the limit.
var LoadFactor = map[string]float64{LoadBelow: 0.5, LoadAt: 1, LoadAbove: 2, LoadFlood: 100}

// Interval is the receiver series' resolution.
const Interval = 100 * time.Millisecond

// ConformTolerance: an interval conforms when its rate is at most this
// much above the expected rate.
const ConformTolerance = 0.10

// Options tune the shaping suite.
type Options struct {
	EgressBps  uint64   // --egress-bandwidth; 0: no egress limit
	IngressBps uint64   // --ingress-bandwidth; 0: no ingress limit
	Bursts     []uint32 // --burst, bytes; default 32 KiB
	Protos     []string // tcp, udp (default both)
	Loads      []string // below, at, above, flood (default the first three)
	Time       time.Duration
	UDPSize    int // default 1400
	MTU        int // of the shaped pod's link, default 1500
	// NoDrain (--set drain=false, Kubernetes only) leaves the CNI's token
	// bucket as a fresh pod gets it: the first flows meet its default
	// burst, which then shows in the overshoot and time-to-conform figures.
	NoDrain bool
	// Annotations (--set annotations, Kubernetes only) names the pod
	// annotations that ask for the limit: suite.AnnotationsKubernetes (the
	// default) or suite.AnnotationsCalico.
	Annotations string
	// Placements are suite.PlacementSameNode and PlacementCrossNode: the
	// shaped pod's peer on its own node or on another (default: both
	// where the agents allow).
	Placements []string
}

// DefaultBurst is the burst when none is given: 32 KiB, which conforms
// from the first interval. Kubernetes runtimes pass far larger ones.
const DefaultBurst = 32 * 1024

// WithDefaults fills unset options.
func (o Options) WithDefaults() Options {
	if len(o.Bursts) == 0 {
		o.Bursts = []uint32{DefaultBurst}
	}
	if len(o.Protos) == 0 {
		o.Protos = []string{"tcp", "udp"}
	}
	if len(o.Loads) == 0 {
		o.Loads = []string{LoadBelow, LoadAt, LoadAbove}
	}
	if o.Time == 0 {
		o.Time = 5 * time.Second
	}
	if o.UDPSize == 0 {
		o.UDPSize = 1400
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	return o
}

// Validate checks the options; each limit and burst must make a tbf the
// kernel accepts.
func (o Options) Validate() error {
	o = o.WithDefaults()
	var errs []error
	if o.EgressBps == 0 && o.IngressBps == 0 {
		errs = append(errs, errors.New("no limit: give --egress-bandwidth and/or --ingress-bandwidth (e.g. 10M)"))
	}
	for _, b := range o.Bursts {
		// What else the kernel takes, the environment checks before it
		// changes anything (qos.Build).
		for _, rate := range []uint64{o.EgressBps, o.IngressBps} {
			if rate == 0 {
				continue
			}
			if err := qosspec.CheckBucket(rate, b); err != nil {
				errs = append(errs, fmt.Errorf("burst %d bytes: %w", b, err))
				break
			}
		}
	}
	for _, p := range o.Protos {
		if p != "tcp" && p != "udp" {
			errs = append(errs, fmt.Errorf("protocol %q: want tcp or udp", p))
		}
	}
	for _, l := range o.Loads {
		if _, ok := LoadFactor[l]; !ok {
			errs = append(errs, fmt.Errorf("load %q: want below, at, above or flood", l))
		}
	}
	if o.Time < time.Second || o.Time > 10*time.Minute {
		errs = append(errs, fmt.Errorf("time %v: want 1s to 10m (the series needs several 100 ms intervals)", o.Time))
	}
	if o.UDPSize < 64 || o.UDPSize > 8900 {
		errs = append(errs, fmt.Errorf("udp size %d: want 64-8900 bytes", o.UDPSize))
	}
	if err := suite.CheckPlacements(o.Placements); err != nil {
		errs = append(errs, err)
	}
	if o.MTU < 1280 || o.MTU > 9000 {
		errs = append(errs, fmt.Errorf("mtu %d: want 1280-9000", o.MTU))
	}
	return errors.Join(errs...)
}

// Header bytes each packet carries beyond its payload on the shaped link
// (tbf counts the Ethernet frame without FCS): Ethernet 14, IPv4 20, then
// UDP 8 or TCP 20 with the 12-byte timestamp option.
const (
	ethIPv4Overhead = 14 + 20
	udpOverhead     = ethIPv4Overhead + 8
	tcpOverhead     = ethIPv4Overhead + 20 + 12
)

// GoodputBps is the payload rate a limit of limitBps allows: UDP datagrams
// of payload bytes, or full TCP segments on a link of the given MTU.
func GoodputBps(limitBps uint64, proto string, payload, mtu int) float64 {
	if proto == "tcp" {
		mss := mtu - 20 - 20 - 12
		return float64(limitBps) * float64(mss) / float64(mss+tcpOverhead)
	}
	return float64(limitBps) * float64(payload) / float64(payload+udpOverhead)
}

// SeriesBps turns interval reports into a rate per interval. It drops
// what is not the flow's own: intervals that start after the flow's
// length (the queue draining once the sender stopped; flow 0 keeps all)
// and a last interval shorter than half the nominal one.
func SeriesBps(ivs []probe.Interval, nominal, flow time.Duration) []float64 {
	out := make([]float64, 0, len(ivs))
	for i, iv := range ivs {
		d := iv.EndS - iv.StartS
		if d <= 0 {
			continue
		}
		if flow > 0 && iv.StartS >= flow.Seconds()-nominal.Seconds()/2 {
			continue
		}
		if i == len(ivs)-1 && d < nominal.Seconds()/2 {
			continue
		}
		v := iv.ThroughputBps
		if v == 0 && iv.Bytes > 0 {
			v = iv.Bytes * 8 / d
		}
		out = append(out, v)
	}
	return out
}

// SeriesAnalysis is what a receiver series says about shaping.
type SeriesAnalysis struct {
	FirstBps float64
	// SteadyBps is the median 100 ms rate of the steady window: a receiver
	// descheduled for a moment on a busy host (an interval at 0, then one
	// catching up, or datagrams its socket dropped) does not move it.
	// SteadyMeanBps is the mean over the same window.
	SteadyBps     float64
	SteadyMeanBps float64
	ConformS      *float64
}

// ConformWindow is how many intervals the conformance test averages: a
// receiver's 100 ms intervals jitter by a packet or two, so one interval
// alone above the tolerance is not yet a flow out of its limit.
const ConformWindow = 5

// AnalyzeSeries finds the first interval's rate; the time to conform, the
// start of the first interval from which both the next ConformWindow
// intervals and the rest of the flow average at most ConformTolerance
// above expected; and the median and mean rate from half-way (or the
// conform time, if later) to the end.
func AnalyzeSeries(ser []float64, step time.Duration, expected float64) SeriesAnalysis {
	var a SeriesAnalysis
	if len(ser) == 0 {
		return a
	}
	a.FirstBps = ser[0]
	mean := func(v []float64) float64 {
		var sum float64
		for _, x := range v {
			sum += x
		}
		return sum / float64(len(v))
	}
	limit := expected * (1 + ConformTolerance)
	conform := len(ser) // first index from which the flow conforms
	for i := range ser {
		if mean(ser[i:min(i+ConformWindow, len(ser))]) <= limit && mean(ser[i:]) <= limit {
			conform = i
			break
		}
	}
	if conform < len(ser) {
		a.ConformS = probe.Float(float64(conform) * step.Seconds())
	}
	from := max(len(ser)/2, min(conform, len(ser)-1))
	var sum float64
	for _, v := range ser[from:] {
		sum += v
	}
	a.SteadyMeanBps = sum / float64(len(ser)-from)
	a.SteadyBps = suite.Median(ser[from:])
	return a
}

func FormatBytes(b uint32) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMi", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKi", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// ParseBursts reads a comma-separated list of burst quantities in bytes
// ("32Ki,4Mi").
func ParseBursts(s string) ([]uint32, error) {
	var out []uint32
	for _, part := range strings.Split(s, ",") {
		v, err := qosspec.ParseQuantity(part)
		if err != nil {
			return nil, fmt.Errorf("burst: %w", err)
		}
		if v < 1500 || v > math.MaxUint32 {
			return nil, fmt.Errorf("burst %q: want at least one full-size packet (1500 bytes) and below 4Gi", part)
		}
		if slices.Contains(out, uint32(v)) {
			return nil, fmt.Errorf("burst %q given twice", part)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}
