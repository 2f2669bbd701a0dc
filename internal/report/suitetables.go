package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/cnperf/cnperf/internal/suite"
)

// Section is one titled table of a report.
type Section struct {
	Title string
	Table Table
	// Pivoted says the table is a pivot (a line per connection and
	// figure), which carries the rows' errors in its lines.
	Pivoted bool
}

// Sections returns the report's tables: the suite's own, as its
// presentation describes them (suite.Table), or, for a suite without
// tables and a run no suite made, every figure pivoted (a line per
// connection and figure, a column per backend).
func (r *Report) Sections() []Section {
	if len(r.Rows) == 0 {
		return nil
	}
	if len(r.Present.Tables) == 0 {
		return []Section{{Table: BuildTable(r.Rows, TableOptions{Present: r.Present}), Pivoted: true}}
	}
	backends := backendsOf(r.Rows)
	var out []Section
	for _, t := range r.Present.Tables {
		if len(backends) < t.MinBackends {
			continue
		}
		var rows []suite.Row
		for _, row := range r.Rows {
			if (t.Has == "" || row.Labels[t.Has] != "") && (t.Lacks == "" || row.Labels[t.Lacks] == "") {
				rows = append(rows, row)
			}
		}
		if len(rows) == 0 {
			continue
		}
		if !t.PerBackend {
			out = append(out, r.section(t.Title, t, rows))
			continue
		}
		for _, b := range backends {
			var sub []suite.Row
			for _, row := range rows {
				if row.Backend == b {
					sub = append(sub, row)
				}
			}
			if len(sub) == 0 {
				continue
			}
			title := "backend " + b
			if b == "" {
				title = "backend not named"
			}
			if t.Title != "" {
				title = t.Title + ", " + title
			}
			out = append(out, r.section(title, t, sub))
		}
	}
	return out
}

func (r *Report) section(title string, t suite.Table, rows []suite.Row) Section {
	if len(t.Pivot) > 0 {
		return Section{Title: title, Table: BuildTable(rows, TableOptions{Metrics: t.Pivot, Present: r.Present}), Pivoted: true}
	}
	return Section{Title: title, Table: columnTable(rows, t.Columns)}
}

// backendsOf returns the rows' backends in order of appearance.
func backendsOf(rows []suite.Row) []string {
	var bs []string
	for _, r := range rows {
		if !slices.Contains(bs, r.Backend) {
			bs = append(bs, r.Backend)
		}
	}
	return bs
}

// columnTable lays rows out a line each, a column per column that shows
// something (Optional, Varying).
func columnTable(rows []suite.Row, cols []suite.Column) Table {
	var t Table
	var cells [][]string // [column][row]
	for _, c := range cols {
		col := make([]string, len(rows))
		has, varies := false, false
		for i, row := range rows {
			v, ok := cell(row, c)
			col[i] = v
			has = has || ok
			varies = varies || v != col[0]
		}
		if (c.Optional && !has) || (c.Varying && !varies) {
			continue
		}
		t.Header = append(t.Header, c.Head)
		cells = append(cells, col)
	}
	for i := range rows {
		line := make([]string, len(cells))
		for j := range cells {
			line[j] = cells[j][i]
		}
		t.Lines = append(t.Lines, line)
		t.First = append(t.First, false)
	}
	return t
}

// cell writes one row's value of a column, and whether the row has it.
func cell(r suite.Row, c suite.Column) (string, bool) {
	missing := c.Missing
	if missing == "" {
		missing = "-"
	}
	switch {
	case c.Field != "":
		return field(r, c.Field), true
	case c.Label != "":
		if v := r.Labels[c.Label]; v != "" {
			return v, true
		}
		return missing, false
	}
	name := c.Metric
	v, ok := r.Median[name]
	if (!ok || math.IsNaN(v)) && c.Else != "" {
		name = c.Else
		v, ok = r.Median[name]
	}
	if !ok || math.IsNaN(v) {
		return missing, false
	}
	div := c.Div
	if div == 0 {
		div = 1
	}
	f := func(x float64) string {
		x /= div
		if c.Words != nil {
			if i := int(x); float64(i) == x && i >= 0 && i < len(c.Words) {
				return c.Words[i]
			}
		}
		if c.Format == "" {
			return suite.FormatMs(x)
		}
		return fmt.Sprintf(c.Format, x)
	}
	s := f(v)
	if c.Spread && r.Repetitions > 1 {
		lo, hi := valueOr(r.Min, name), valueOr(r.Max, name)
		if !math.IsNaN(lo) && !math.IsNaN(hi) {
			s += " (" + f(lo) + "-" + f(hi) + ")"
		}
	}
	return s, true
}

// field writes one of a row's own fields.
func field(r suite.Row, name string) string {
	switch name {
	case suite.FieldConnection:
		return r.Connection
	case suite.FieldBackend:
		return r.Backend
	case suite.FieldPath:
		return r.Src + " -> " + r.Dst
	case suite.FieldOverhead:
		ov := "-"
		if r.OverheadPct != nil {
			ov = fmt.Sprintf("%+.1f %%", -*r.OverheadPct)
		} else if r.Connection == suite.NodeNode {
			ov = "reference"
		}
		if so := r.ServiceOverhead; so != nil && so.TCPPct != nil {
			ov += fmt.Sprintf(" (vs cross node: TCP %+.1f %%", -*so.TCPPct)
			if so.RRAddedMs != nil {
				ov += fmt.Sprintf(", RR %+.1f µs", 1000**so.RRAddedMs)
			}
			ov += ")"
		}
		return ov
	}
	return "?" + name
}

// failures lists the rows' step errors, each named by its row.
func (r *Report) failures() []string {
	var out []string
	for _, row := range r.Rows {
		name := r.Present.RowName(row)
		if row.Backend != "" {
			name = row.Backend + " " + name
		}
		for _, e := range row.Errors {
			out = append(out, name+": "+e)
		}
	}
	return out
}
