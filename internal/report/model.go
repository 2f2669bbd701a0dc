package report

import (
	"encoding/json"
	"fmt"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"math"
	"sort"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Report is one run as every rendering sees it: `cnperf run` as the run
// ends, `cnperf report RUN_ID` and the dashboard later, all build it with
// FromRuns from the same runs, so each format prints the same bytes for
// the same run. Rows carry the suite's aggregated figures; Outcomes the
// single measurements behind them (their interval series and histograms
// feed the charts). Matrices and Shaping are filled by suites that produce
// them (qos-priority, shaping, a mesh).
type Report struct {
	RunID string `json:"run_id"`
	// RunIDs are every run of the report (a suite's phases, a
	// cni-compare's backends), in order.
	RunIDs    []string          `json:"run_ids"`
	Suite     string            `json:"suite"`
	Status    string            `json:"status"` // e.g. "finished", "running"
	Progress  Progress          `json:"progress"`
	CreatedAt time.Time         `json:"created_at,omitzero"`
	Params    map[string]string `json:"params,omitempty"` // suite options, shown as given
	// Environment is what the run ran on (kernel, CPUs, MTUs, CNI, ...),
	// as its environment described it.
	Environment *hostinfo.Environment `json:"environment,omitempty"`

	Rows     []suite.Row     `json:"rows"`
	Outcomes []suite.Outcome `json:"outcomes,omitempty"`
	Matrices []Matrix        `json:"matrices,omitempty"`
	Shaping  []Shaping       `json:"shaping,omitempty"`
	// Notes are remarks shown above the tables (e.g. what a suite could not
	// measure on this kernel).
	Notes []string `json:"notes,omitempty"`
	// Conclusions are the suite's verdicts (Presentation.Conclusion),
	// shown below the tables.
	Conclusions []string `json:"conclusions,omitempty"`
	// Checks are the SLO evaluations, when `cnperf run --slo` gave
	// objectives.
	Checks []suite.Check `json:"slo,omitempty"`
	// Present is how the suite's rows are shown (row names, charts).
	Present suite.Presentation `json:"-"`
}

// Progress counts a run's measurements.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Percent returns the share done, 0-100.
func (p Progress) Percent() float64 {
	if p.Total <= 0 {
		return 0
	}
	return 100 * float64(p.Done) / float64(p.Total)
}

// Finished reports whether the run has ended (successfully or not).
func (r *Report) Finished() bool {
	switch r.Status {
	case "finished", "failed", "cancelled", "timed out", "done", "succeeded":
		return true
	}
	return false
}

// Matrix is a grid of one metric: qos-priority (variant × marking) or a
// node-to-node heat map (source node × destination node). NaN marks a cell
// that was not measured.
type Matrix struct {
	Title    string      `json:"title"`
	Metric   string      `json:"metric"`          // dotted metric name; gives the unit and which way is better
	Label    string      `json:"label,omitempty"` // what the cells show, when the metric's own label does not say
	RowLabel string      `json:"row_label"`
	ColLabel string      `json:"col_label"`
	Rows     []string    `json:"rows"`
	Cols     []string    `json:"cols"`
	Values   [][]float64 `json:"values"` // [row][col]
	// Marked cells are drawn outlined, their titles ending in Mark
	// (a matrix's coverage marks the overdue pairs); nil: none.
	Marked [][]bool `json:"marked,omitempty"`
	Mark   string   `json:"mark,omitempty"`
}

// MarshalJSON writes unmeasured cells as null (JSON has no NaN).
func (m Matrix) MarshalJSON() ([]byte, error) {
	type plain Matrix
	vals := make([][]*float64, len(m.Values))
	for i, row := range m.Values {
		vals[i] = make([]*float64, len(row))
		for j, v := range row {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				vals[i][j] = &v
			}
		}
	}
	return json.Marshal(struct {
		plain
		Values [][]*float64 `json:"values"`
	}{plain(m), vals})
}

// UnmarshalJSON reads null cells back as NaN.
func (m *Matrix) UnmarshalJSON(b []byte) error {
	type plain Matrix
	var aux struct {
		plain
		Values [][]*float64 `json:"values"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*m = Matrix(aux.plain)
	m.Values = make([][]float64, len(aux.Values))
	for i, row := range aux.Values {
		m.Values[i] = make([]float64, len(row))
		for j, v := range row {
			m.Values[i][j] = math.NaN()
			if v != nil {
				m.Values[i][j] = *v
			}
		}
	}
	return nil
}

// Validate checks that the grid's shape matches its labels.
func (m Matrix) Validate() error {
	if len(m.Values) != len(m.Rows) {
		return fmt.Errorf("matrix %q: %d rows of values for %d row labels", m.Title, len(m.Values), len(m.Rows))
	}
	for i, row := range m.Values {
		if len(row) != len(m.Cols) {
			return fmt.Errorf("matrix %q: row %q has %d values for %d columns", m.Title, m.Rows[i], len(row), len(m.Cols))
		}
	}
	return nil
}

// Shaping is one shaped flow measured over time against its limit.
type Shaping struct {
	Name     string           `json:"name"`      // e.g. "egress 10 Mbit/s, burst 32 KiB"
	LimitBps float64          `json:"limit_bps"` // the configured rate
	Series   []probe.Interval `json:"intervals"` // measured at the receiver
}

// Conformance summarises a shaped flow: the first interval's overshoot
// over the limit and the mean after the first second, both relative to
// the limit, in percent.
func (s Shaping) Conformance() (firstOvershootPct, steadyPct float64, ok bool) {
	if s.LimitBps <= 0 || len(s.Series) == 0 {
		return 0, 0, false
	}
	firstOvershootPct = 100 * (s.Series[0].ThroughputBps - s.LimitBps) / s.LimitBps
	var sum, n float64
	for _, iv := range s.Series {
		if iv.StartS >= 1 {
			sum += iv.ThroughputBps
			n++
		}
	}
	if n == 0 {
		return firstOvershootPct, 0, false
	}
	return firstOvershootPct, 100 * (sum / n) / s.LimitBps, true
}

// FromOutcomes builds a report of outcomes made up for tests and examples
// (reporttest): the rows are aggregated here, and a node-to-node matrix is
// added when the outcomes cover more than two node pairs. Runs read from a
// server go through FromRuns.
func FromOutcomes(runID, suiteName string, outcomes []suite.Outcome) *Report {
	r := &Report{RunID: runID, RunIDs: []string{runID}, Suite: suiteName, Status: "finished", Outcomes: outcomes, Rows: suite.Rows(outcomes)}
	r.Progress = Progress{Done: len(outcomes), Total: len(outcomes)}
	if m, ok := NodeMatrix(outcomes); ok {
		r.Matrices = append(r.Matrices, m)
	}
	return r
}

// NodeMatrix builds a heat map of the median round-trip time (rr p50,
// else ping average) between the nodes of the outcomes, source nodes as
// rows. ok is false when fewer than three node pairs were measured: a
// matrix of one or two cells says nothing a table does not.
func NodeMatrix(outcomes []suite.Outcome) (Matrix, bool) {
	type pair struct{ src, dst string }
	vals := map[pair][]float64{}
	nodes := map[string]bool{}
	for _, o := range outcomes {
		if o.Result == nil || o.Step.Src.Node == "" || o.Step.Dst.Node == "" {
			continue
		}
		var v float64
		switch {
		case o.Step.Measure == suite.MeasureRR && o.Result.RTTms != nil:
			v = o.Result.RTTms.P50
		case o.Step.Measure == suite.MeasurePing && o.Result.RTTms != nil:
			v = o.Result.RTTms.Avg
		default:
			continue
		}
		p := pair{o.Step.Src.Node, o.Step.Dst.Node}
		vals[p] = append(vals[p], v)
		nodes[p.src], nodes[p.dst] = true, true
	}
	if len(vals) < 3 {
		return Matrix{}, false
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	m := Matrix{Title: "Round-trip time between nodes (median)", Metric: "rtt_ms.p50", Label: "round trip (rr p50, else ping avg)",
		RowLabel: "source node", ColLabel: "destination node", Rows: names, Cols: names}
	for _, s := range names {
		row := make([]float64, len(names))
		for j, d := range names {
			if vs, ok := vals[pair{s, d}]; ok {
				row[j] = suite.Median(vs)
			} else {
				row[j] = math.NaN()
			}
		}
		m.Values = append(m.Values, row)
	}
	return m, true
}
