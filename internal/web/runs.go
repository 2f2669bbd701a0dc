package web

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/scenario"
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
func runParams(run api.Run) (scenario.RunParams, bool) {
	var p scenario.RunParams
	if len(run.Params) == 0 || json.Unmarshal(run.Params, &p) != nil || p.APIVersion != scenario.ParamsAPIVersion {
		return p, false
	}
	return p, true
}

// progressOf counts a run's finished tasks.
func progressOf(run api.Run) report.Progress {
	var p report.Progress
	for state, n := range run.Counts {
		p.Total += n
		if api.TerminalState(state) {
			p.Done += n
		}
	}
	return p
}

// reportOf builds the report of one stored run: the suite's rows from the
// run's steps and results (only finished tasks count while it runs), or,
// for a run that no suite made, its results as they are.
func reportOf(run api.Run, reg *scenario.Registry) *report.Report {
	r := &report.Report{RunID: run.ID, Suite: run.Suite, Status: run.State, CreatedAt: run.CreatedAt, Progress: progressOf(run)}
	p, outs, err := scenario.OutcomesFromRun(run)
	if err != nil {
		if _, ok := runParams(run); ok {
			r.Notes = append(r.Notes, "the run's results could not be paired with its suite's steps: "+err.Error())
		}
		r.Outcomes = plainOutcomes(run)
		return r
	}
	r.Suite = p.Suite
	r.Params = map[string]string{"time": p.Options.Time.String(), "repeat": fmt.Sprint(p.Options.Repeat)}
	if p.Options.Backend != "" {
		r.Params["backend"] = p.Options.Backend
	}
	if p.Phases > 1 || p.Phase != "" {
		r.Params["phase"] = fmt.Sprintf("%s (%d of %d)", p.Phase, p.PhaseIndex+1, p.Phases)
	}
	for k, v := range p.Options.Set {
		r.Params[k] = v
	}
	// Tasks not finished yet are left out rather than shown as errors.
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	var done []scenario.Outcome
	for i, o := range outs {
		if i < len(tasks) && !api.TerminalState(tasks[i].State) {
			continue
		}
		done = append(done, o)
	}
	r.Outcomes = done
	r.Rows = scenario.Rows(done)
	if reg != nil {
		if s, err := reg.Get(p.Suite); err == nil {
			r.Rows = s.Rows(done)
		}
	}
	if m, ok := report.NodeMatrix(done); ok {
		r.Matrices = append(r.Matrices, m)
	}
	return r
}

// plainOutcomes turns the finished tasks of a run made of plain tasks into
// outcomes named by their endpoints, for the charts.
func plainOutcomes(run api.Run) []scenario.Outcome {
	var out []scenario.Outcome
	for _, t := range run.Tasks {
		if !api.TerminalState(t.State) {
			continue
		}
		o := scenario.Outcome{Step: scenario.Step{Measure: t.Type, Src: scenario.Endpoint{Name: t.SrcPodUID, IP: t.SrcPodIP},
			Dst: scenario.Endpoint{Name: t.DstPodUID, IP: t.DstPodIP}}}
		var res probe.Result
		switch {
		case t.State != api.StateSucceeded:
			o.Err = strings.TrimSpace(t.State + ": " + t.Reason)
		case len(t.Result) == 0 || json.Unmarshal(t.Result, &res) != nil:
			o.Err = "no typed result"
		default:
			o.Result = &res
			o.Step.Measure = res.Kind
			o.Step.Spec.Kind = res.Kind
		}
		out = append(out, o)
	}
	return out
}
