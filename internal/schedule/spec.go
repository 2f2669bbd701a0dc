// Package schedule runs suites on a schedule inside the server (issue 13
// part 3): `cnperf schedule create --suite matrix --every 6h` stores a
// schedule, and every server's Scheduler looks for due schedules, claims
// each due time in the store (one server of several wins it), and runs the
// suite with the same planner and runner `cnperf run` uses (suite.Runner)
// against the agents the server holds, through the server's own API.
//
// A schedule never runs twice at once: a due time that comes while its
// previous run is still going is recorded as skipped, with the reason, or,
// for a suite that cycles through a plan (the matrix), started as soon as
// that run ends. Every
// due time leaves a record (package store: ScheduleRun) holding the ids of
// the runs it made and a summary of its rows, outliers and SLO verdict,
// which /metrics (package metrics) and the dashboard read. The running
// server beats the record; one whose server stopped is failed as abandoned
// by whichever server looks next, and its runs are cancelled.
package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

// Bounds of a schedule's interval. MinEvery is the default shortest
// interval a server accepts (cnperf server --schedule-min-every lowers
// it, for tests); MaxEvery the longest.
const (
	DefaultMinEvery = time.Minute
	MaxEvery        = 31 * 24 * time.Hour
)

// Prepare checks a create request against the suites and the server's
// shortest interval and returns the schedule to store: an unknown suite,
// a bad or too short interval, bad options, unknown --set keys or a bad
// SLO file are *api.Error 400s naming the field.
func Prepare(reg *suite.Registry, sc api.ScheduleCreate, minEvery time.Duration) (store.Schedule, error) {
	if strings.TrimSpace(sc.Suite) == "" {
		return store.Schedule{}, api.BadRequest("suite", "empty: name a suite (known: %s)", strings.Join(reg.Names(), ", "))
	}
	s, err := reg.Get(sc.Suite)
	if err != nil {
		return store.Schedule{}, api.BadRequest("suite", "%v", err)
	}
	every, err := time.ParseDuration(strings.TrimSpace(sc.Every))
	if err != nil {
		return store.Schedule{}, api.BadRequest("every", "%q: want a duration such as 6h, 30m or 90s", sc.Every)
	}
	if every < minEvery || every > MaxEvery {
		return store.Schedule{}, api.BadRequest("every", "%v: want at least %v (this server's --schedule-min-every) and at most %v", every, minEvery, MaxEvery)
	}
	o := suite.DefaultOptions()
	if sc.Time != "" {
		if o.Time, err = time.ParseDuration(strings.TrimSpace(sc.Time)); err != nil {
			return store.Schedule{}, api.BadRequest("time", "%q: want a duration such as 5s or 500ms", sc.Time)
		}
	}
	if sc.Repeat != 0 {
		o.Repeat = sc.Repeat
	}
	o.Backend, o.Set = sc.Backend, sc.Set
	if err := o.Validate(); err != nil {
		return store.Schedule{}, api.BadRequest("options", "%v", err)
	}
	if err := suite.CheckKeys(s, o); err != nil {
		return store.Schedule{}, api.BadRequest("set", "%v", err)
	}
	if c, ok := s.(suite.OptionsChecker); ok {
		if err := c.CheckOptions(o); err != nil {
			return store.Schedule{}, api.BadRequest("set", "%v", err)
		}
	}
	if len(sc.SLO) > 0 {
		objs, err := suite.ParseSLOs(sc.SLO, reg)
		if err != nil {
			return store.Schedule{}, api.BadRequest("slo", "%v", err)
		}
		if suite.HasAvailability(objs) {
			// Evaluated on the schedule's rows, it would be skipped: refused
			// rather than passed silently.
			return store.Schedule{}, api.BadRequest("slo", "an availability objective (success ... over WINDOW) is not evaluated on a schedule's rows: check it with cnperf slo check")
		}
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("encode options: %w", err)
	}
	return store.Schedule{Suite: s.Name(), Every: every, Options: raw, SLO: sc.SLO}, nil
}

// options decodes a stored schedule's suite options.
func options(sc store.Schedule) (suite.Options, error) {
	var o suite.Options
	if err := json.Unmarshal(sc.Options, &o); err != nil {
		return o, fmt.Errorf("schedule %s: options: %w", sc.ID, err)
	}
	return o, nil
}

// APISchedule is sc as v2 answers it, with runs (newest first); rows
// says whether their summaries keep their rows.
func APISchedule(sc store.Schedule, runs []store.ScheduleRun, rows bool) api.Schedule {
	out := api.Schedule{ID: sc.ID, Suite: sc.Suite, Every: sc.Every.String(), EveryS: sc.Every.Seconds(),
		SLO: sc.SLO, NextAt: sc.NextAt, CreatedAt: sc.CreatedAt, Runs: []api.ScheduleRun{}}
	if o, err := options(sc); err == nil {
		out.Time, out.Repeat, out.Backend, out.Set = o.Time.String(), o.Repeat, o.Backend, o.Set
	}
	for _, r := range runs {
		out.Runs = append(out.Runs, APIRun(r, rows))
	}
	return out
}

// APIRun is r as v2 answers it; rows says whether its summary keeps its
// rows.
func APIRun(r store.ScheduleRun, rows bool) api.ScheduleRun {
	out := api.ScheduleRun{ID: r.ID, ScheduleID: r.ScheduleID, State: string(r.State), Reason: r.Reason,
		DueAt: r.DueAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, RunIDs: r.RunIDs}
	if out.RunIDs == nil {
		out.RunIDs = []string{}
	}
	if sum, err := DecodeSummary(r.Summary); err == nil && sum != nil {
		if !rows {
			sum.Rows = nil
		}
		out.Summary = sum
	}
	return out
}

// DecodeSummary reads a stored summary (nil when there is none).
func DecodeSummary(raw json.RawMessage) (*api.ScheduleSummary, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var sum api.ScheduleSummary
	if err := json.Unmarshal(raw, &sum); err != nil {
		return nil, errors.Join(errors.New("schedule summary"), err)
	}
	return &sum, nil
}
