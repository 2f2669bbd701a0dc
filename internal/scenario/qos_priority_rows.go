package scenario

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// labelGroup is the outcomes of one labelled row, by repetition.
type labelGroup struct {
	labels map[string]string
	first  Outcome
	reps   map[int]map[string]float64
	series map[string][]float64
	errs   []string
}

// labelRows groups outcomes by the values of keys in their steps' labels
// (in order of first appearance) and aggregates each group's figures over
// its repetitions: median, min and max. figures returns what one outcome
// adds to its repetition's figures (and, optionally, series; the first
// repetition's are kept).
func labelRows(outcomes []Outcome, keys []string, figures func(o Outcome) (map[string]float64, map[string][]float64)) []Row {
	var order []string
	groups := map[string]*labelGroup{}
	for _, o := range outcomes {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = o.Step.Labels[k]
		}
		id := strings.Join(parts, "\x00")
		g, ok := groups[id]
		if !ok {
			g = &labelGroup{labels: map[string]string{}, first: o, reps: map[int]map[string]float64{}, series: map[string][]float64{}}
			for _, k := range keys {
				g.labels[k] = o.Step.Labels[k]
			}
			groups[id] = g
			order = append(order, id)
		}
		if o.Err != "" || o.Result == nil {
			msg := o.Err
			if msg == "" {
				msg = "no result"
			}
			g.errs = append(g.errs, fmt.Sprintf("%s #%d: %s", o.Step.Measure, o.Step.Repeat+1, msg))
			continue
		}
		figs, ser := figures(o)
		rep := g.reps[o.Step.Repeat]
		if rep == nil {
			rep = map[string]float64{}
			g.reps[o.Step.Repeat] = rep
		}
		for k, v := range figs {
			if !math.IsNaN(v) {
				rep[k] = v
			}
		}
		for k, v := range ser {
			if _, have := g.series[k]; !have && len(v) > 0 {
				g.series[k] = v
			}
		}
	}
	out := make([]Row, 0, len(order))
	for _, id := range order {
		g := groups[id]
		r := Row{Connection: g.first.Step.Connection, Backend: g.first.Step.Backend,
			Src: endpointLabel(g.first.Step.Src), Dst: endpointLabel(g.first.Step.Dst),
			Repetitions: len(g.reps), Errors: g.errs, Labels: g.labels,
			Median: map[string]float64{}, Min: map[string]float64{}, Max: map[string]float64{}}
		if len(g.series) > 0 {
			r.Series = g.series
		}
		values := map[string][]float64{}
		reps := make([]int, 0, len(g.reps))
		for rep := range g.reps {
			reps = append(reps, rep)
		}
		sort.Ints(reps)
		for _, rep := range reps {
			for k, v := range g.reps[rep] {
				values[k] = append(values[k], v)
			}
		}
		for k, vs := range values {
			r.Median[k], r.Min[k], r.Max[k] = Median(vs), minOf(vs), maxOf(vs)
		}
		out = append(out, r)
	}
	return out
}

// ms writes milliseconds with about three significant digits.
func ms(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func optF(p *float64, format string) string {
	if p == nil || math.IsNaN(*p) {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

// fig returns a row's median figure as a pointer (nil when absent).
func fig(r Row, name string) *float64 {
	v, ok := r.Median[name]
	if !ok || math.IsNaN(v) {
		return nil
	}
	return &v
}

// A TableWriter is a suite that prints its own rows as a terminal table
// (the QoS suites' matrices and verdicts) instead of the baseline's.
type TableWriter interface {
	WriteTable(w io.Writer, rows []Row) error
}

// QoSSuites returns the QoS suites: qos-priority, shaping, policing and
// capacity.
func QoSSuites() []Suite {
	return []Suite{QoSPrioritySuite{}, ShapingSuite{}, PolicingSuite{}, CapacitySuite{}}
}

// WriteSuiteTable writes out with the suite's own table: a header with
// the runs, the table, the failed SLO checks.
func WriteSuiteTable(w io.Writer, out Output, tw TableWriter) error {
	if _, err := fmt.Fprintf(w, "%s: %d runs (%s); %d repetitions of %v; median over repetitions\n\n", out.Suite, len(out.RunIDs),
		shortRuns(out.RunIDs), out.Options.Repeat, out.Options.Time); err != nil {
		return err
	}
	if err := tw.WriteTable(w, out.Rows); err != nil {
		return err
	}
	if len(out.Checks) > 0 {
		fmt.Fprintln(w, "\nSLO:")
		for _, c := range out.Checks {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			if _, err := fmt.Fprintf(w, "  %s  %s (%s): %g\n", verdict, c.Objective.Expr, c.Connection, c.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// shortRuns names the first and last run of many.
func shortRuns(ids []string) string {
	switch len(ids) {
	case 0:
		return "none"
	case 1, 2:
		return strings.Join(ids, ", ")
	}
	return ids[0] + " … " + ids[len(ids)-1]
}

// qosRowMetrics are the figures the QoS suites' rows add to the probes'
// (SLO files may name them).
var qosRowMetrics = []string{
	"tos", "dscp", "ping.loss_pct", "reference_latency_ms.p99", "latency_histogram_bin_us", "background_throughput_bps", "background_loss_pct",
	"limit_bps", "burst_bytes", "offered_bps", "goodput_bps", "expected_bps", "steady_state_bps", "steady_state_mean_bps",
	"steady_state_error_pct", "first_interval_bps", "overshoot_pct", "time_to_conform_s",
	"capacity_bps", "loss_threshold_pct", "retest_loss_pct", "retest_receiver_bps", "retest_pass", "trials",
	"supported",
}

// An OptionsChecker is a suite that can check its options and settings
// before anything is built (a lab, a run); the backend may be unknown
// then, so what depends on it is checked again in Plan.
type OptionsChecker interface {
	CheckOptions(o Options) error
}

// CheckOptions implements OptionsChecker.
func (QoSPrioritySuite) CheckOptions(o Options) error {
	_, err := QoSPriorityOptionsFrom(o)
	return err
}

// CheckOptions implements OptionsChecker.
func (ShapingSuite) CheckOptions(o Options) error {
	_, err := ShapingOptionsFrom(o)
	return err
}

// CheckOptions implements OptionsChecker.
func (CapacitySuite) CheckOptions(o Options) error {
	if _, err := CapacityOptionsFrom(o); err != nil {
		return err
	}
	_, err := capacityPaths(o)
	return err
}
