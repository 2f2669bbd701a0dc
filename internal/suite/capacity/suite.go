package capacity

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "capacity"

// Suite finds, per path (pod-pod same node, pod-pod cross node,
// node-node), the highest UDP rate whose loss at the receiver stays below
// a threshold (default 0.1 %), by search: doubling from a start rate until
// loss appears, then bisecting, then a longer re-test at the rate found,
// 10 % lower each time it fails. Each round of the search is one phase
// with the next trial of every path still searching, run one after
// another. It needs a Runner that supports Follower.
//
// Settings (--set): loss (threshold %), start, min, max (bit/s),
// precision (relative, 0.05), trial-time, offload (auto, the default, or
// off: see docs/probes.md); the re-test lasts --time.
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements Suite.
func (Suite) Describe() string {
	return "per path, the highest UDP rate with receiver loss below a threshold (default 0.1 %), found by search and re-tested"
}

// pathNames are the short names the paths setting takes.
var pathNames = map[string]string{"same-node": suite.PodPodSameNode, "cross-node": suite.PodPodCrossNode, "node-node": suite.NodeNode}

// capacityPaths reads the paths setting ("cross-node,node-node"); empty
// means every path.
func capacityPaths(o suite.Options) ([]string, error) {
	v, ok := o.Set["paths"]
	if p, named := o.Set["placement"]; named {
		if ok {
			return nil, fmt.Errorf("suite %s: give paths or placement, not both (placement is its other name)", SuiteName)
		}
		v, ok = p, true
	}
	if !ok {
		return suite.ConnectionOrder, nil
	}
	var out []string
	for _, x := range suite.SplitList(v) {
		c, ok := pathNames[x]
		if !ok {
			return nil, fmt.Errorf("suite %s: path %q: want same-node, cross-node or node-node", SuiteName, x)
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("suite %s: path %q given twice", SuiteName, x)
		}
		out = append(out, c)
	}
	return out, nil
}

// parseOffload reads the offload setting: auto or off.
func parseOffload(v string) (string, error) {
	switch v {
	case probe.OffloadAuto, probe.OffloadOff:
		return v, nil
	}
	return "", fmt.Errorf("want %s or %s", probe.OffloadAuto, probe.OffloadOff)
}

// OptionsFrom turns the common options and settings into
// Options.
func OptionsFrom(o suite.Options) (Options, error) {
	var co Options
	if err := o.Validate(); err != nil {
		return co, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	co.RetestTime = o.Time
	if err := Settings(&co).Apply(SuiteName, o); err != nil {
		return co, err
	}
	if err := co.Validate(); err != nil {
		return co, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	return co.withDefaults(), nil
}

// Plan implements Suite: the first round (every path's first trial).
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	return s.Follow(agents, o, caps, nil)
}

// Follow implements Follower: the next round of every path whose search
// has not finished, replayed from the outcomes so far.
func (s Suite) Follow(agents []suite.Endpoint, o suite.Options, _ suite.Caps, done []suite.Outcome) ([]suite.Phase, error) {
	co, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	paths, err := capacityPaths(o)
	if err != nil {
		return nil, err
	}
	searches, err := replayCapacity(co, done)
	if err != nil {
		return nil, err
	}
	round := 0
	for _, srch := range searches {
		round = max(round, len(srch.trials))
	}
	var steps []suite.Step
	for _, conn := range paths {
		p, ok := pairs[conn]
		if !ok {
			if len(paths) < len(suite.ConnectionOrder) {
				return nil, fmt.Errorf("suite %s: no agents for the path %s", SuiteName, conn)
			}
			continue
		}
		srch, ok := searches[conn]
		if !ok {
			if srch, err = NewSearch(co); err != nil {
				return nil, err
			}
		}
		spec, retest, more := srch.Next()
		if !more {
			continue
		}
		spec.Target = p.Dst.ResponderAddr
		measure := "trial"
		if retest {
			measure = "retest"
		}
		steps = append(steps, suite.Step{Connection: conn, Backend: o.Backend, Measure: measure, Repeat: len(srch.trials),
			Src: p.Src, Dst: p.Dst, Spec: spec, Exclusive: true, Labels: map[string]string{labelCapacityOpts: encodeCapacityOptions(co)}})
	}
	if len(steps) == 0 {
		return nil, nil
	}
	return []suite.Phase{{Name: fmt.Sprintf("%s round %d", s.Name(), round+1), Steps: steps}}, nil
}

// replayCapacity rebuilds each path's search from its outcomes.
func replayCapacity(co Options, done []suite.Outcome) (map[string]*Search, error) {
	out := map[string]*Search{}
	for _, o := range done {
		srch, ok := out[o.Step.Connection]
		if !ok {
			var err error
			if srch, err = NewSearch(co); err != nil {
				return nil, err
			}
			out[o.Step.Connection] = srch
		}
		loss, recv := math.Inf(1), 0.0
		if o.Err == "" && o.Result != nil {
			if o.Result.LossPct != nil {
				loss = *o.Result.LossPct
			}
			if o.Result.ThroughputBps != nil {
				recv = o.Result.ThroughputBps.Receiver
			}
		}
		srch.Observe(loss, recv)
	}
	return out, nil
}

// Rows implements Suite: one row per path with the capacity found, the
// re-test's loss and rate at the receiver, and the trials as series.
func (s Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	if len(outcomes) == 0 {
		return nil
	}
	co := rowsOptions(outcomes)
	searches, err := replayCapacity(co, outcomes)
	if err != nil {
		return []suite.Row{{Connection: "capacity", Errors: []string{err.Error()}}}
	}
	var rows []suite.Row
	order := append([]string(nil), suite.ConnectionOrder...)
	for _, o := range outcomes {
		if !slices.Contains(order, o.Step.Connection) {
			order = append(order, o.Step.Connection)
		}
	}
	for _, conn := range order {
		srch, ok := searches[conn]
		if !ok {
			continue
		}
		var first suite.Outcome
		var errs []string
		for _, o := range outcomes {
			if o.Step.Connection != conn {
				continue
			}
			if first.Step.Connection == "" {
				first = o
			}
			if o.Err != "" {
				errs = append(errs, fmt.Sprintf("%s at %s: %s", o.Step.Measure, fmtBps(rateOf(o.Step.Spec)), o.Err))
			}
		}
		cr := srch.Row()
		r := suite.Row{Connection: conn, Backend: first.Step.Backend, Src: suite.EndpointLabel(first.Step.Src), Dst: suite.EndpointLabel(first.Step.Dst),
			Repetitions: 1, Errors: append(errs, cr.Errors...), Median: cr.Metrics(), Min: map[string]float64{}, Max: map[string]float64{},
			Series: map[string][]float64{}}
		if cr.RetestReceiverBps != nil {
			r.Median["retest_receiver_bps"] = *cr.RetestReceiverBps
		}
		r.Median["retest_pass"] = 0
		if cr.RetestPass {
			r.Median["retest_pass"] = 1
		}
		r.Median["trials"] = float64(len(cr.Trials))
		for _, t := range cr.Trials {
			r.Series["trial_rate_bps"] = append(r.Series["trial_rate_bps"], float64(t.RateBps))
			r.Series["trial_loss_pct"] = append(r.Series["trial_loss_pct"], t.LossPct)
		}
		rows = append(rows, r)
	}
	return rows
}

// labelCapacityOpts holds the search's options (JSON) in every step, so
// Rows replays the search exactly as it ran.
const labelCapacityOpts = "capacity_options"

func encodeCapacityOptions(co Options) string {
	b, _ := json.Marshal(co)
	return string(b)
}

func decodeCapacityOptions(s string) (Options, error) {
	var co Options
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&co); err != nil {
		return co, err
	}
	return co.withDefaults(), co.Validate()
}

// rowsOptions reads the search's options back from the outcomes.
func rowsOptions(outcomes []suite.Outcome) Options {
	for _, o := range outcomes {
		if s := o.Step.Labels[labelCapacityOpts]; s != "" {
			if co, err := decodeCapacityOptions(s); err == nil {
				return co
			}
		}
	}
	return Options{}.withDefaults()
}

func rateOf(s probe.Spec) uint64 {
	if s.RateBps == nil {
		return 0
	}
	return *s.RateBps
}

// Presentation implements suite.Presenter: a line per path with the
// capacity found and its re-test.
func (Suite) Presentation() suite.Presentation {
	return suite.Presentation{Tables: []suite.Table{{Columns: []suite.Column{
		{Head: "backend", Field: suite.FieldBackend},
		{Head: "connection", Field: suite.FieldConnection},
		{Head: "src -> dst", Field: suite.FieldPath},
		{Head: "capacity Mbit/s", Metric: "capacity_bps", Div: 1e6, Format: "%.1f"},
		{Head: "loss threshold %", Metric: "loss_threshold_pct", Format: "%g"},
		{Head: "re-test loss %", Metric: "retest_loss_pct", Format: "%.3f"},
		{Head: "re-test received Mbit/s", Metric: "retest_receiver_bps", Div: 1e6, Format: "%.1f"},
		{Head: "re-test", Metric: "retest_pass", Words: []string{"fail", "pass"}},
		{Head: "trials", Metric: "trials", Format: "%.0f"},
	}}}}
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	if _, err := OptionsFrom(o); err != nil {
		return err
	}
	_, err := capacityPaths(o)
	return err
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{"capacity_bps", "loss_threshold_pct", "retest_loss_pct", "retest_receiver_bps", "retest_pass", "trials"}
}
