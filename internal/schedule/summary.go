package schedule

import (
	"math"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// maxFailures bounds the failed checks a summary lists.
const maxFailures = 20

// Summarize keeps what a schedule's record needs of a suite run: each
// row's labels and medians (NaN dropped: JSON cannot hold it), the
// outliers the suite flagged, and the SLO verdict of checks (nil when the
// schedule has no SLO).
func Summarize(rows []suite.Row, checks []suite.Check, slo bool) api.ScheduleSummary {
	var sum api.ScheduleSummary
	for _, r := range rows {
		sr := api.SummaryRow{Connection: r.Connection, Labels: r.Labels, Errors: r.Errors, Median: map[string]float64{}}
		for k, v := range r.Median {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				sr.Median[k] = v
			}
		}
		src, dst := r.Labels[matrix.LabelSrc], r.Labels[matrix.LabelDst]
		if src != "" && dst != "" {
			sum.Pairs++
		}
		if why := r.Labels[matrix.LabelOutlier]; why != "" {
			what := "node " + r.Labels[matrix.LabelNode]
			if src != "" {
				what = src + " → " + dst
			}
			sum.Outliers = append(sum.Outliers, what+": "+why)
		}
		sum.Rows = append(sum.Rows, sr)
	}
	if slo {
		v := &api.SLOVerdict{Pass: suite.AllPass(checks), Checks: len(checks)}
		for _, c := range checks {
			if !c.Failed() {
				continue
			}
			v.Failed++
			if len(v.Failures) < maxFailures {
				v.Failures = append(v.Failures, c.Line())
			}
		}
		sum.SLO = v
	}
	return sum
}
