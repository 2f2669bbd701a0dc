package api

import (
	"encoding/json"
	"time"
)

// ScheduleCreate is the body of POST /api/v2/schedules: a suite the server
// runs by itself every Every (a Go duration: "6h", "30m"), first at once.
type ScheduleCreate struct {
	Suite string `json:"suite"`
	Every string `json:"every"`
	// Time ("5s"), Repeat, Backend and Set are the suite's options as
	// `cnperf run` takes them (defaults: 5s, 3).
	Time    string            `json:"time,omitempty"`
	Repeat  int               `json:"repeat,omitempty"`
	Backend string            `json:"backend,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
	// SLO is an SLO file (docs/slo.md) evaluated against every run's rows.
	SLO json.RawMessage `json:"slo,omitempty"`
}

// Schedule is a schedule as v2 answers it.
type Schedule struct {
	ID      string            `json:"id"`
	Suite   string            `json:"suite"`
	Every   string            `json:"every"`
	EveryS  float64           `json:"every_s"`
	Time    string            `json:"time"`
	Repeat  int               `json:"repeat"`
	Backend string            `json:"backend,omitempty"`
	Set     map[string]string `json:"set,omitempty"`
	SLO     json.RawMessage   `json:"slo,omitempty"`
	NextAt  time.Time         `json:"next_at"`
	// CreatedAt is when it was made.
	CreatedAt time.Time `json:"created_at"`
	// Runs are its latest runs, newest first (a few in listings; their
	// summaries without rows).
	Runs []ScheduleRun `json:"runs"`
}

// Schedule run states (the store's).
const (
	ScheduleRunning   = "running"
	ScheduleSucceeded = "succeeded"
	ScheduleFailed    = "failed"
	ScheduleSkipped   = "skipped"
)

// ScheduleRun is one time a schedule came due: the suite run it started,
// whose phases are the runs RunIDs, or why it did not run (skipped: the
// previous one was still going; failed: the reason).
type ScheduleRun struct {
	ID         int64            `json:"id"`
	ScheduleID string           `json:"schedule_id"`
	State      string           `json:"state"`
	Reason     string           `json:"reason,omitempty"`
	DueAt      time.Time        `json:"due_at"`
	StartedAt  time.Time        `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at,omitempty"`
	RunIDs     []string         `json:"run_ids"`
	Summary    *ScheduleSummary `json:"summary,omitempty"`
}

// ScheduleSummary is what the server keeps of a finished suite run of a
// schedule: its rows (the medians), the outliers the suite flagged, and
// the SLO verdict.
type ScheduleSummary struct {
	Rows     []SummaryRow `json:"rows,omitempty"`
	Pairs    int          `json:"pairs"`
	Outliers []string     `json:"outliers,omitempty"`
	SLO      *SLOVerdict  `json:"slo,omitempty"`
	// NextCycle is the pair plan's cycle the schedule's next run starts
	// at (suites with a "cycle" setting: the matrix), so consecutive runs
	// take consecutive cycles.
	NextCycle int `json:"next_cycle,omitempty"`
}

// SummaryRow is one row of a suite run: its labels (src_node, dst_node,
// outlier, ...) and the medians of its figures.
type SummaryRow struct {
	Connection string             `json:"connection,omitempty"`
	Labels     map[string]string  `json:"labels,omitempty"`
	Median     map[string]float64 `json:"median,omitempty"`
	Errors     []string           `json:"errors,omitempty"`
}

// SLOVerdict is an SLO file evaluated on a run's rows.
type SLOVerdict struct {
	Pass   bool `json:"pass"`
	Checks int  `json:"checks"`
	Failed int  `json:"failed"`
	// Failures are the failed checks as the reports print them (at most
	// 20).
	Failures []string `json:"failures,omitempty"`
}
