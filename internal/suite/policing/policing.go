// Package policing is the suite of ingress policing of a pod's traffic (the
// police action on arrival at its host-side veth): like shaping, the
// receiver's rate per 100 ms and the loss below, at and above the rate, or
// one row saying why the kernel cannot police.
package policing

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// SuiteName is the suite's name.
const SuiteName = "policing"

// LabelUnsupported marks the single row of a policing run on a kernel
// without the police action.
const LabelUnsupported = "unsupported"

// Suite polices what a pod sends on arrival at its host-side veth
// (ingress qdisc, match-all u32, police action dropping the excess) and
// measures, like shaping, the receiver's rate per 100 ms and the loss of
// TCP and UDP below, at and above the rate. Every flow is bounded by its
// duration and the probe's timeout. On a kernel without the police action
// (act_police), the run is one row saying so, with a short ping between
// the pods so the row is stored with a run.
//
// Settings (--set): rate (bits/s, default 10M), burst (bytes, default
// 32Ki), protos, loads, udp-size.
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "ingress policing of a pod's traffic (police action): receiver rate and loss, or why the kernel cannot police"
}

var policingSettings = []string{"rate", "burst", "protos", "loads", "udp-size"}

// Plan implements Suite.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	if err := o.CheckSet(s.Name(), policingSettings...); err != nil {
		return nil, err
	}
	so := shaping.Options{Time: o.Time, EgressBps: 10e6}
	if o.Backend == "vxlan" {
		so.MTU = 1500 - 50
	}
	for k, v := range o.Set {
		var err error
		switch k {
		case "rate":
			so.EgressBps, err = qosspec.ParseBandwidth(v)
		case "burst":
			so.Bursts, err = shaping.ParseBursts(v)
			if err == nil && len(so.Bursts) != 1 {
				err = errors.New("policing takes one burst")
			}
		default:
			err = so.SetFlowKey(k, v)
		}
		if err != nil {
			return nil, fmt.Errorf("suite %s: %s %q: %w", s.Name(), k, v, err)
		}
	}
	if err := so.Validate(); err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	so = so.WithDefaults()
	police := qosspec.Spec{Setup: qosspec.SpecPolice, RateBps: so.EgressBps, BurstBytes: so.Bursts[0]}
	pair, err := shaping.ShapedPair(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	if why, ok := caps.Unsupported[suite.CapPolice]; ok {
		// The kernel under the environment cannot police: that is the result.
		return []suite.Phase{unsupportedPhase(s.Name(), pair, o.Backend, why)}, nil
	}
	var phases []suite.Phase
	for rep := 0; rep < o.Repeat; rep++ {
		steps := shaping.LimitSteps(so, so.Bursts[0], rep, pair, o.Backend)
		for i := range steps {
			steps[i].Labels[shaping.LabelDirection] = "police"
			steps[i].Connection = fmt.Sprintf("pod %s policed", pair.Src.Name)
		}
		phases = append(phases, suite.Phase{Name: fmt.Sprintf("%s %s at %s, #%d", s.Name(), pair.Src.Name, qosspec.FormatBps(so.EgressBps), rep+1),
			Steps: steps, Changes: []suite.Change{{What: suite.CapPolice, Member: pair.Src.Name, QoS: &police}}})
	}
	return phases, nil
}

// unsupportedPhase is the policing run on a kernel that cannot police:
// one short, bounded ping whose row says why nothing else was measured.
func unsupportedPhase(name string, p suite.Pair, backend string, why string) suite.Phase {
	return suite.Phase{Name: name + ": " + why, Steps: []suite.Step{{
		Connection: fmt.Sprintf("pod %s policed", p.Src.Name), Backend: backend, Measure: suite.MeasurePing, Src: p.Src, Dst: p.Dst,
		Spec:   probe.Spec{Kind: probe.KindPing, Target: p.Dst.IP, Count: 3, Interval: probe.Duration(10 * time.Millisecond), Timeout: probe.Duration(time.Second)},
		Labels: map[string]string{LabelUnsupported: why},
	}}}
}

// Rows implements Suite: the policed flows' rows, or the one row saying
// the kernel lacks the police action.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	for _, o := range outcomes {
		if msg, ok := o.Step.Labels[LabelUnsupported]; ok {
			return []suite.Row{{Connection: o.Step.Connection, Backend: o.Step.Backend, Src: suite.EndpointLabel(o.Step.Src), Dst: suite.EndpointLabel(o.Step.Dst),
				Median: map[string]float64{"supported": 0}, Min: map[string]float64{}, Max: map[string]float64{},
				Labels: map[string]string{LabelUnsupported: msg}}}
		}
	}
	rows := shaping.LimitRows(outcomes)
	for i := range rows {
		rows[i].Median["supported"] = 1
	}
	return rows
}

// WriteTable writes the policed flows, or the unsupported line.
func (Suite) WriteTable(w io.Writer, rows []suite.Row) error {
	if len(rows) == 1 && rows[0].Labels[LabelUnsupported] != "" {
		_, err := fmt.Fprintf(w, "policing %s: %s\n", rows[0].Src, rows[0].Labels[LabelUnsupported])
		return err
	}
	return shaping.WriteLimitTable(w, rows)
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string { return append([]string{"supported"}, shaping.LimitMetrics...) }

// Presentation implements suite.Presenter: as shaping's rows.
func (Suite) Presentation() suite.Presentation { return shaping.LimitPresentation() }
