package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/probe"
)

// ParamsAPIVersion is the apiVersion of the params a suite's run carries.
const ParamsAPIVersion = "cnperf/v1"

// RunParams is what the Runner stores in each run's params
// (api.RunCreate.Params): enough to rebuild the suite's rows from the
// stored run alone. Steps[i] is the step of the run's i-th task (tasks in
// creation order, that is by id).
type RunParams struct {
	APIVersion string `json:"apiVersion"`
	Suite      string `json:"suite"`
	// Invocation is shared by the runs of one Runner.Run call (the phases
	// of one suite run, and the backends of one cni-compare in the lab).
	Invocation string  `json:"invocation"`
	Phase      string  `json:"phase"`
	PhaseIndex int     `json:"phase_index"` // 0-based
	Phases     int     `json:"phases"`
	Options    Options `json:"options"`
	Steps      []Step  `json:"steps"`
	// Environment is what the run ran on (kernel, CPUs, MTUs, CNI, ...),
	// when its environment could say.
	Environment *hostinfo.Environment `json:"environment,omitempty"`
	// Made are the changes made while the run ran (Change.After), with
	// when each was asked for and made. The Runner adds them to its copy
	// of the run once the run ended; the server keeps the params the run
	// was created with, so a run read back from it has none.
	Made []ChangeMade `json:"made,omitempty"`
}

// outcomes pairs the run's tasks (by id order) with the steps.
func outcomes(run api.Run, steps []Step) ([]Outcome, error) {
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	if len(tasks) != len(steps) {
		return nil, fmt.Errorf("run %s has %d tasks for %d steps", run.ID, len(tasks), len(steps))
	}
	out := make([]Outcome, len(steps))
	for i, t := range tasks {
		out[i] = Outcome{Step: steps[i]}
		if t.State != api.StateSucceeded {
			msg := t.State
			if t.Reason != "" {
				msg += ": " + t.Reason
			}
			out[i].Err = msg
			continue
		}
		if len(t.Result) == 0 {
			out[i].Err = "succeeded without a result"
			continue
		}
		var res probe.Result
		if err := json.Unmarshal(t.Result, &res); err != nil {
			out[i].Err = fmt.Sprintf("result of task %s: %v", t.TaskID, err)
			continue
		}
		out[i].Result = &res
	}
	return out, nil
}

// OutcomesFromRun rebuilds the outcomes of a stored run from its params
// and tasks (the run as GET /api/v2/runs/ID returns it, tasks included).
func OutcomesFromRun(run api.Run) (RunParams, []Outcome, error) {
	var p RunParams
	if len(run.Params) == 0 {
		return p, nil, fmt.Errorf("run %s (suite %q) carries no suite params: it was not made by a suite", run.ID, run.Suite)
	}
	if err := json.Unmarshal(run.Params, &p); err != nil {
		return p, nil, fmt.Errorf("run %s: params: %w", run.ID, err)
	}
	if p.APIVersion != ParamsAPIVersion {
		return p, nil, fmt.Errorf("run %s: params apiVersion %q, want %q", run.ID, p.APIVersion, ParamsAPIVersion)
	}
	outs, err := outcomes(run, p.Steps)
	for i := range outs {
		outs[i].Made = p.Made
	}
	return p, outs, err
}

// RowsFromRuns rebuilds a suite's rows from stored runs (all of one suite:
// the phases of one run, or the backends of a cni-compare), with the
// suite's own Rows, as `cnperf report RUN_ID` needs.
func RowsFromRuns(reg *Registry, runs ...api.Run) ([]Row, error) {
	if len(runs) == 0 {
		return nil, errors.New("no run given")
	}
	var (
		suite string
		all   []Outcome
	)
	for _, run := range runs {
		p, outs, err := OutcomesFromRun(run)
		if err != nil {
			return nil, err
		}
		if suite != "" && p.Suite != suite {
			return nil, fmt.Errorf("runs of different suites (%s, %s) cannot share one table", suite, p.Suite)
		}
		suite = p.Suite
		all = append(all, outs...)
	}
	s, err := reg.Get(suite)
	if err != nil {
		return nil, err
	}
	return s.Rows(all), nil
}

// optionsJSON is Options on the wire: the time as a duration string.
type optionsJSON struct {
	Time    probe.Duration    `json:"time"`
	Repeat  int               `json:"repeat"`
	Backend string            `json:"backend,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
}

// MarshalJSON writes the time as a duration string ("5s").
func (o Options) MarshalJSON() ([]byte, error) {
	return json.Marshal(optionsJSON{Time: probe.Duration(o.Time), Repeat: o.Repeat, Backend: o.Backend, Set: o.Set})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Options) UnmarshalJSON(b []byte) error {
	var j optionsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = Options{Time: j.Time.D(), Repeat: j.Repeat, Backend: j.Backend, Set: j.Set}
	return nil
}
