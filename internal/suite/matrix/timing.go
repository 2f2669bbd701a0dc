package matrix

import (
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// TaskOverhead is about what a task costs beyond its measurement:
// dispatch, connecting, reporting.
const TaskOverhead = 500 * time.Millisecond

// measures are a pair's measurements in a round, in order.
var measures = []string{suite.MeasureTCP, suite.MeasureUDP, suite.MeasureRR, suite.MeasurePing}

// specLength is how long a measurement of sp lasts.
func specLength(sp probe.Spec) time.Duration {
	if d := sp.DurationOr(0); d > 0 {
		return d
	}
	return time.Duration(sp.Count) * sp.IntervalOr(time.Second)
}

// roundTime is about how long a round of m takes: per repetition, the
// longest start delay (the jitter bound) and a pair's measurements one
// after another, each with TaskOverhead.
func (m Options) roundTime() time.Duration {
	d := m.Jitter
	for _, measure := range measures {
		d += specLength(spec(measure, suite.Endpoint{}, m)) + TaskOverhead
	}
	return time.Duration(m.Repeat) * d
}

// CycleTimes are about how long each cycle of the window of o's plan
// takes over n nodes, rounds end to end (re-measures of suspects not
// counted): what a schedule's --every is set against. The zones plan
// depends on the nodes' labels, so it is not estimated here.
func CycleTimes(o suite.Options, n int) ([]time.Duration, error) {
	m, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, fmt.Errorf("suite %s: %d nodes: want at least two", SuiteName, n)
	}
	switch m.Plan {
	case pairplan.PlanAll:
		rounds := 2 * (n - 1)
		if n%2 == 1 {
			rounds = 2 * n
		}
		return []time.Duration{time.Duration(rounds) * m.roundTime()}, nil
	case pairplan.PlanSample:
		out := make([]time.Duration, pairplan.Window(n, m.Peers))
		for i := range out {
			out[i] = time.Duration(SampleRoundCount(n, m.Peers, m.Cycle+i)) * m.roundTime()
		}
		return out, nil
	}
	return nil, fmt.Errorf("suite %s: plan %s: cycle times depend on the nodes' labels", SuiteName, m.Plan)
}

// timing says how long o's cycles over n nodes take (the shortest and
// longest) and the window end to end, or "" for the zones plan.
func timing(o suite.Options, n int) string {
	ts, err := CycleTimes(o, n)
	if err != nil || len(ts) == 0 {
		return ""
	}
	lo, hi, all := ts[0], ts[0], time.Duration(0)
	for _, t := range ts {
		lo, hi, all = min(lo, t), max(hi, t), all+t
	}
	cycle := lo.Round(time.Second).String()
	if hi > lo {
		cycle += " to " + hi.Round(time.Second).String()
	}
	return fmt.Sprintf("; a cycle takes about %s (%v a task beyond its measurement), the window %.1f h end to end", cycle, TaskOverhead, all.Hours())
}
