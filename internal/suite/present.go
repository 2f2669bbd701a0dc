package suite

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// Presentation says how a suite's rows are shown, as data; internal/report
// draws the tables and charts from it, so the report knows no suite's
// labels. A suite gives it by implementing Presenter; without one, rows
// are named by their connection and labels in name order.
type Presentation struct {
	// LabelOrder names the labels that tell a suite's rows apart, in the
	// order a row's name gives them ("variant", "marking"); other labels
	// follow in name order.
	LabelOrder []string
	// Conclusion is a label that holds a conclusion, not a key
	// (qos-priority's verdict): it is left out of row names and shown once
	// per value of the label ConclusionOf, as a note.
	Conclusion, ConclusionOf string
	// Matrices are grids of one figure over two labels.
	Matrices []MatrixHint
	// Series, when set, is a per-interval series of the rows to draw
	// against a limit (shaping's receiver rate per 100 ms).
	Series *SeriesHint
	// Tables are the suite's own tables of its rows, in order; without
	// them the report pivots every figure (a line per connection and
	// figure, a column per backend).
	Tables []Table
}

// Table is one table of a suite's rows, as data: a line per row it takes
// and a column per Column, or, with Pivot, a line per connection and
// figure and a column per backend. internal/report draws it for the
// terminal, Markdown and HTML.
type Table struct {
	Title string
	// PerBackend draws one table per backend of the rows, each titled
	// "backend NAME".
	PerBackend bool
	// MinBackends leaves the table out unless the rows span at least this
	// many backends.
	MinBackends int
	// Has and Lacks choose the rows: those with the label Has set, and
	// those without the label Lacks ("" chooses all).
	Has, Lacks string
	// Columns are the table's columns, in order.
	Columns []Column
	// Pivot, when set, lists the figures of a pivoted table instead of
	// Columns.
	Pivot []string
}

// Row fields a Column can show.
const (
	FieldConnection = "connection"
	FieldBackend    = "backend"
	FieldPath       = "path"     // "SRC -> DST"
	FieldOverhead   = "overhead" // against node-node (OverheadPct) and, on pod-service, the Service's (ServiceOverhead)
)

// Column is one column of a Table: a row's field, label or figure.
type Column struct {
	Head string
	// Field, Label or Metric says what the cells show.
	Field  string
	Label  string
	Metric string
	// Else is a figure shown when the row lacks Metric (contention's
	// total on its "all" line).
	Else string
	// Div divides the figure (1e6 for Mbit/s); 0 is 1.
	Div float64
	// Format writes the figure ("%.1f"); "" writes about three
	// significant digits.
	Format string
	// Words name the figure's values 0, 1, ... ("fail", "pass").
	Words []string
	// Spread adds the repetitions' min-max: "12 (11-13)".
	Spread bool
	// Missing is what a cell without its value shows ("-" when empty).
	Missing string
	// Optional leaves the column out when no row of the table has it.
	Optional bool
	// Varying leaves the column out when every row shows the same.
	Varying bool
}

// MatrixHint is a grid of Metric with a row per value of RowKey and a
// column per value of ColKey.
type MatrixHint struct {
	Title, Metric, Label string
	RowKey, RowTitle     string
	ColKey, ColTitle     string
}

// SeriesHint names a row's series (Series, one value per Interval) and the
// figure it is drawn against (Limit); NameLabels name the chart.
type SeriesHint struct {
	Series, Limit string
	Interval      time.Duration
	NameLabels    []string
}

// A Presenter is a suite that says how its rows are shown.
type Presenter interface {
	Presentation() Presentation
}

// PresentationOf returns s's presentation (the zero one when s has none
// or is nil).
func PresentationOf(s Suite) Presentation {
	if p, ok := s.(Presenter); ok {
		return p.Presentation()
	}
	return Presentation{}
}

// RowName names a row's line group: its connection, and the suite's own
// labels when it has them (in LabelOrder, then by name), so rows that
// share a connection stay apart. The conclusion label is left out.
func (p Presentation) RowName(r Row) string {
	keys := make([]string, 0, len(r.Labels))
	for k, v := range r.Labels {
		if k != p.Conclusion && v != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return r.Connection
	}
	rank := func(k string) int {
		if i := slices.Index(p.LabelOrder, k); i >= 0 {
			return i
		}
		return len(p.LabelOrder)
	}
	sort.Slice(keys, func(i, j int) bool {
		if ri, rj := rank(keys[i]), rank(keys[j]); ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + r.Labels[k]
	}
	return r.Connection + " · " + strings.Join(parts, ", ")
}
