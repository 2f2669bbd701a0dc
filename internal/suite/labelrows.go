package suite

import (
	"fmt"
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

// LabelRows groups outcomes by the values of keys in their steps' labels
// (in order of first appearance) and aggregates each group's figures over
// its repetitions: median, min and max. figures returns what one outcome
// adds to its repetition's figures (and, optionally, series; the first
// repetition's are kept).
func LabelRows(outcomes []Outcome, keys []string, figures func(o Outcome) (map[string]float64, map[string][]float64)) []Row {
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
		if failure := o.failure(); failure != "" {
			g.errs = append(g.errs, failure)
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
			Src: EndpointLabel(g.first.Step.Src), Dst: EndpointLabel(g.first.Step.Dst),
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
			r.Median[k], r.Min[k], r.Max[k] = Median(vs), MinOf(vs), MaxOf(vs)
		}
		r.values = values
		out = append(out, r)
	}
	return out
}

// FormatMs writes milliseconds with about three significant digits.
func FormatMs(v float64) string {
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

// FormatOpt writes *p with format, or "-" when p is nil or NaN.
func FormatOpt(p *float64, format string) string {
	if p == nil || math.IsNaN(*p) {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

// Fig returns a row's median figure as a pointer (nil when absent).
func Fig(r Row, name string) *float64 {
	v, ok := r.Median[name]
	if !ok || math.IsNaN(v) {
		return nil
	}
	return &v
}

// Scaled returns *p divided by div (nil stays nil).
func Scaled(p *float64, div float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p / div
	return &v
}
