package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Placement: where the kernel ran an rr run's two ends. Unpinned, both
// cnperf and sockperf run either with client and responder on one CPU
// (the responder's wake-up preempts the client; app p50 14-16 µs here) or
// on two (every wake-up an IPI to a halted vCPU; 45-70 µs), and a tool
// stays in one mode for minutes (README.md, "How to read
// the output"). So each run says which it was in, and the table says when
// the two tools' medians come from different ones.
//
// In every sample period of the window, the thread of each process whose
// run time grew most is taken as that end's loop thread (a Go program
// moves its loop between threads, so not a fixed one), and stat's
// processor field says which CPU it last ran on; a period counts as
// "same CPU" when the two are equal.

// Placement modes of a run, by the share of its sample periods in which
// the two ends' busiest threads sat on one CPU.
const (
	oneCPU   = "one-CPU"
	twoCPU   = "two-CPU"
	mixed    = "mixed"
	unplaced = "unknown"
)

// classify is a run's placement mode: one-CPU from 80 % of same-CPU
// periods, two-CPU up to 20 %, mixed between; unknown with no period in
// which both ends ran.
func classify(same, periods int) string {
	if periods <= 0 {
		return unplaced
	}
	switch pct := 100 * float64(same) / float64(periods); {
	case pct >= 80:
		return oneCPU
	case pct <= 20:
		return twoCPU
	}
	return mixed
}

// samePct is the share of same-CPU periods in %, NaN with none counted.
func (r watchResult) samePct() float64 {
	if r.periods == 0 {
		return math.NaN()
	}
	return 100 * float64(r.same) / float64(r.periods)
}

// placement is the run's mode (unknown when its window was not measured).
func (r rrRun) placement() string {
	if r.w.err != nil {
		return unplaced
	}
	return classify(r.w.same, r.w.periods)
}

// medianRuns are the indices of the runs a median of v comes from (the
// middle one, or the middle two of an even count), leaving NaN out.
func medianRuns(v []float64) []int {
	var idx []int
	for i, x := range v {
		if !math.IsNaN(x) {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	switch n := len(idx); {
	case n == 0:
		return nil
	case n%2 == 1:
		return idx[n/2 : n/2+1]
	default:
		return idx[n/2-1 : n/2+1]
	}
}

// placementsDiffer says, for one row, whether the two tools' medians come
// from runs of different placement modes, and if so a plain line saying
// which runs and modes; "" when they agree.
func placementsDiffer(cn, sp []rrRun, value func(rrRun) float64) string {
	dc, mc := medianModes(cn, value)
	ds, ms := medianModes(sp, value)
	if slices.Equal(mc, ms) {
		return ""
	}
	return fmt.Sprintf("the medians come from runs of different placement: cnperf %s, sockperf %s; the ratio compares placements, not loops", dc, ds)
}

// medianModes names the run(s) a median comes from and their modes, e.g.
// "run 3 (one-CPU)" or "runs 2, 4 (one-CPU, two-CPU)", and returns the
// modes (once each, sorted).
func medianModes(runs []rrRun, value func(rrRun) float64) (string, []string) {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = value(r)
	}
	idx := medianRuns(v)
	if len(idx) == 0 {
		return "no run", nil
	}
	sort.Ints(idx)
	var ns, ms []string
	for _, i := range idx {
		ns = append(ns, fmt.Sprint(i+1))
		ms = append(ms, runs[i].placement())
	}
	if ms[0] == ms[len(ms)-1] {
		ms = ms[:1]
	}
	what := "run"
	if len(ns) > 1 {
		what = "runs"
	}
	set := slices.Compact(slices.Sorted(slices.Values(ms)))
	return fmt.Sprintf("%s %s (%s)", what, strings.Join(ns, ", "), strings.Join(ms, ", ")), set
}

// placementSummary is one tool's same-CPU share per run and the count of
// each mode, e.g. "98 % 97 % 3 % (one-CPU 2, two-CPU 1)".
func placementSummary(runs []rrRun) string {
	var pcts []string
	count := map[string]int{}
	for _, r := range runs {
		if r.w.err == nil {
			pcts = append(pcts, fmtPct(r.w.samePct()))
		} else {
			pcts = append(pcts, "–")
		}
		count[r.placement()]++
	}
	var modes []string
	for _, m := range []string{oneCPU, twoCPU, mixed, unplaced} {
		if count[m] > 0 {
			modes = append(modes, fmt.Sprintf("%s %d", m, count[m]))
		}
	}
	return strings.Join(pcts, " ") + " (" + strings.Join(modes, ", ") + ")"
}

func fmtPct(p float64) string {
	if math.IsNaN(p) {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", p)
}

// timeline shows how the same-CPU share moved through the window: one
// digit per tenth of its periods, the share of same-CPU periods in it in
// tenths (0: under 10 %, 9: 90 % or more), so "9999900000" is a run that
// changed mode half way and "5555555555" one that switched back and forth
// throughout.
func timeline(marks []bool) string {
	const parts = 10
	if len(marks) < parts {
		return ""
	}
	var b strings.Builder
	for i := range parts {
		part := marks[i*len(marks)/parts : (i+1)*len(marks)/parts]
		same := 0
		for _, m := range part {
			if m {
				same++
			}
		}
		b.WriteByte(byte('0' + min(9, 10*same/len(part))))
	}
	return b.String()
}
