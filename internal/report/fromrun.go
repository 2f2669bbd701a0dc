package report

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// RunParams reads the suite params a stored run carries, if any.
func RunParams(run api.Run) (suite.RunParams, bool) {
	var p suite.RunParams
	if len(run.Params) == 0 || json.Unmarshal(run.Params, &p) != nil || p.APIVersion != suite.ParamsAPIVersion {
		return p, false
	}
	return p, true
}

// RunProgress counts a run's finished tasks.
func RunProgress(run api.Run) Progress {
	var p Progress
	for state, n := range run.Counts {
		p.Total += n
		if api.TerminalState(state) {
			p.Done += n
		}
	}
	return p
}

// FromRuns builds the report of stored runs (as GET /api/v2/runs/ID
// answers them, tasks included): one run, or the phases and backends of
// one suite invocation, the first run naming the report. Rows come from the
// suite's own Rows when reg knows the suite; tasks not finished yet are
// left out, so a run in progress shows what it has. Runs that no suite made
// get their results as they are, for the charts, and one row per finished
// task (plainRows).
func FromRuns(reg *suite.Registry, runs ...api.Run) (*Report, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("no run given")
	}
	first := runs[0]
	r := &Report{RunID: first.ID, Suite: first.Suite, Status: first.State, CreatedAt: first.CreatedAt}
	var all []suite.Outcome
	name := ""
	for _, run := range runs {
		r.RunIDs = append(r.RunIDs, run.ID)
		pr := RunProgress(run)
		r.Progress.Done += pr.Done
		r.Progress.Total += pr.Total
		if run.State == api.RunRunning {
			r.Status = api.RunRunning
		} else if r.Status != api.RunRunning && run.State != api.RunSucceeded {
			r.Status = run.State
		}
		p, outs, err := suite.OutcomesFromRun(run)
		if err != nil {
			if _, ok := RunParams(run); ok {
				r.Notes = append(r.Notes, fmt.Sprintf("run %s: results could not be paired with the suite's steps: %v", run.ID, err))
			}
			all = append(all, plainOutcomes(run)...)
			continue
		}
		if name != "" && p.Suite != name {
			return nil, fmt.Errorf("runs of different suites (%s, %s) cannot share one report", name, p.Suite)
		}
		name = p.Suite
		if r.Environment == nil {
			r.Environment = p.Environment
		}
		if r.Params == nil {
			r.Params = map[string]string{"time": p.Options.Time.String(), "repeat": fmt.Sprint(p.Options.Repeat)}
			for k, v := range p.Options.Set {
				r.Params[k] = v
			}
		}
		if p.Options.Backend != "" {
			r.Params["backend"] = joinNew(r.Params["backend"], p.Options.Backend)
		}
		if p.Phases > 1 || p.Phase != "" {
			r.Params["phase"] = joinNew(r.Params["phase"], fmt.Sprintf("%s (%d of %d)", p.Phase, p.PhaseIndex+1, p.Phases))
		}
		tasks := append([]api.TaskV2(nil), run.Tasks...)
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
		for i, o := range outs {
			if i < len(tasks) && !api.TerminalState(tasks[i].State) {
				continue
			}
			all = append(all, o)
		}
	}
	if name != "" {
		r.Suite = name
		r.Rows = suite.Rows(all)
		if reg != nil {
			if s, err := reg.Get(name); err == nil {
				r.Rows = s.Rows(all)
				r.Present = suite.PresentationOf(s)
			}
		}
		suite.SetOverhead(r.Rows)
	} else {
		r.Rows = plainRows(all)
	}
	r.Outcomes = all
	r.AddSuiteCharts()
	if m, ok := NodeMatrix(all); ok {
		r.Matrices = append(r.Matrices, m)
	}
	return r, nil
}

func joinNew(list, v string) string {
	if list == "" {
		return v
	}
	for _, x := range strings.Split(list, ", ") {
		if x == v {
			return list
		}
	}
	return list + ", " + v
}

// plainOutcomes turns the finished tasks of a run made of plain tasks into
// outcomes named by their endpoints.
func plainOutcomes(run api.Run) []suite.Outcome {
	var out []suite.Outcome
	for _, t := range run.Tasks {
		if !api.TerminalState(t.State) {
			continue
		}
		// A v2 task is named by its probe's kind, a seed task by its type.
		kind := t.Type
		var spec probe.Spec
		if len(t.Spec) > 0 && json.Unmarshal(t.Spec, &spec) == nil && spec.Kind != "" {
			kind = spec.Kind
		}
		o := suite.Outcome{Step: suite.Step{Connection: fmt.Sprintf("task %d (%s)", t.ID, kind), Measure: kind, Src: suite.Endpoint{Name: t.SrcPodUID, IP: t.SrcPodIP},
			Dst: suite.Endpoint{Name: t.DstPodUID, IP: t.DstPodIP}}}
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

// plainRows gives each outcome of a run no suite made its own row, named
// by its task, with the figures of its result's kind under the names a
// suite's rows give them (suite.RowFigures: a udp result's throughput is
// "udp.throughput_bps", a ping's loss "ping.loss_pct"), so labels and
// units follow the kind. A plain run's tasks are not repetitions of one
// measurement, so nothing is aggregated.
func plainRows(outs []suite.Outcome) []suite.Row {
	var rows []suite.Row
	for _, o := range outs {
		r := suite.Row{Connection: o.Step.Connection, Src: suite.EndpointLabel(o.Step.Src), Dst: suite.EndpointLabel(o.Step.Dst),
			Median: map[string]float64{}, Min: map[string]float64{}, Max: map[string]float64{}}
		if o.Result == nil {
			r.Errors = []string{fmt.Sprintf("%s: %s", o.Step.Measure, o.Err)}
			rows = append(rows, r)
			continue
		}
		r.Repetitions = 1
		for name, v := range suite.RowFigures(o.Step.Measure, o.Result) {
			r.Median[name], r.Min[name], r.Max[name] = v, v, v
		}
		rows = append(rows, r)
	}
	return rows
}

// FromLive builds the report of a suite run that just ended from the runs
// its runner last read from the server (suite.Report.Runs): the same
// FromRuns that `cnperf report RUN_ID` and the dashboard use, so `cnperf
// run` prints the bytes they print. Several reports (a cni-compare's
// backends, one lab each) make one report.
func FromLive(reg *suite.Registry, reps ...suite.Report) (*Report, error) {
	var runs []api.Run
	for _, rep := range reps {
		runs = append(runs, rep.Runs...)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("the suite run made no run")
	}
	return FromRuns(reg, runs...)
}

// Invocation returns the runs of the same suite invocation as run (its
// phases, and the backends of a cni-compare in the lab), in creation
// order, from a listing of runs; run alone when it carries no invocation.
func Invocation(run api.Run, listing []api.Run) []api.Run {
	p, ok := RunParams(run)
	if !ok || p.Invocation == "" {
		return []api.Run{run}
	}
	var out []api.Run
	for _, o := range listing {
		if op, ok := RunParams(o); ok && op.Invocation == p.Invocation {
			if o.ID == run.ID {
				o = run // the full run, tasks included
			}
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return []api.Run{run}
	}
	return out
}
