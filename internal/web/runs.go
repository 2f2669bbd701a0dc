package web

import (
	"context"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// maxListedRuns bounds how many runs the overview reads (the API lists
// oldest first; the overview shows the newest).
const maxListedRuns = 10000

// allRuns reads the run listing, oldest first, up to maxListedRuns.
func allRuns(ctx context.Context, a API) ([]api.Run, error) {
	var out []api.Run
	after := ""
	for len(out) < maxListedRuns {
		p, err := a.ListRuns(ctx, 1000, after)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Runs...)
		if p.NextAfter == "" || len(p.Runs) == 0 {
			break
		}
		after = p.NextAfter
	}
	return out, nil
}

// runParams reads the suite params a run carries, if any.
func runParams(run api.Run) (suite.RunParams, bool) { return report.RunParams(run) }

// progressOf counts a run's finished tasks.
func progressOf(run api.Run) report.Progress { return report.RunProgress(run) }

// reportOf builds the report of one stored run.
func reportOf(run api.Run, reg *suite.Registry) *report.Report {
	r, err := report.FromRuns(reg, run)
	if err != nil { // one run is always of one suite
		return &report.Report{RunID: run.ID, Suite: run.Suite, Status: run.State, Notes: []string{err.Error()}}
	}
	return r
}
