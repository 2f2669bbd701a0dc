package evaluate

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
	rs "github.com/cnperf/cnperf/internal/suite/responsiveness"
)

// judgeLatency is a line per responsiveness path: idle and loaded p50, the
// rise and round trips per minute, with the suite's own verdict (where the
// queue was) as the reason. No standing queue holds; a queue anywhere
// (a node's qdisc, the path, or not located) fails.
func judgeLatency(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		l := Line{Scope: r.Connection, Verdict: Unknown, Reason: r.Labels[rs.LabelVerdict]}
		var figs []string
		idle, loaded, rise := suite.Fig(r, rs.FigIdleP50), suite.Fig(r, rs.FigLoadedP50), suite.Fig(r, rs.FigRiseP50)
		if idle != nil && loaded != nil {
			figs = append(figs, fmt.Sprintf("p50 idle %s ms, loaded %s ms", suite.FormatMs(*idle), suite.FormatMs(*loaded)))
		}
		if rise != nil {
			figs = append(figs, "rise "+suite.FormatMs(*rise)+" ms")
			l.Key = &Figure{Name: rs.FigRiseP50, Value: *rise, Unit: "ms"}
		}
		if i, ld := suite.Fig(r, rs.FigRPMIdle), suite.Fig(r, rs.FigRPMLoaded); i != nil && ld != nil {
			figs = append(figs, fmt.Sprintf("RPM %.0f idle, %.0f loaded", *i, *ld))
		}
		l.Figures = strings.Join(figs, ", ")
		if l.Reason == "" {
			l.Reason = "no idle and loaded round trips to compare"
		}
		if e := rowErrors(r); e != "" {
			l.Reason += "; " + e
		}
		switch {
		case rise == nil:
		case r.Labels[rs.LabelQueueAt] == "none":
			l.Verdict = Holds
		default:
			l.Verdict = Fails
		}
		out = append(out, l)
	}
	return out
}
