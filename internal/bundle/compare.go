package bundle

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
)

// DefaultBy is the environment fields that name a column by default.
var DefaultBy = []string{"cni", "backend"}

// Comparison sets studies side by side: a column per bundle, named by
// the environment fields By, a line per question and scope, each cell the
// line's verdict and headline figure with its ratio to the reference
// column's.
type Comparison struct {
	By      []string `json:"by"`
	Ref     string   `json:"ref"`
	Columns []string `json:"columns"`
	Lines   []Line   `json:"lines"`
}

// Line is one question and scope across the bundles.
type Line struct {
	Question string `json:"question"`
	Scope    string `json:"scope,omitempty"`
	Cells    []Cell `json:"cells"`
}

// Cell is one bundle's answer: absent when its sheet has no such line.
type Cell struct {
	Verdict string           `json:"verdict,omitempty"`
	Key     *evaluate.Figure `json:"key,omitempty"`
	// Ratio is Key's value over the reference column's.
	Ratio *float64 `json:"ratio,omitempty"`
}

// Compare builds the comparison of bundles: by names the environment
// fields of the column names (DefaultBy when empty), ref the reference
// column (a column name or a bundle's name; the first when empty).
func Compare(bundles []*Bundle, by []string, ref string) (*Comparison, error) {
	if len(bundles) == 0 {
		return nil, fmt.Errorf("no bundle to compare")
	}
	if len(by) == 0 {
		by = DefaultBy
	}
	for _, f := range by {
		if _, ok := (hostinfo.Environment{}).Get(f); !ok {
			return nil, fmt.Errorf("--by %q: want one of %s", f, strings.Join(hostinfo.Fields, ", "))
		}
	}
	c := &Comparison{By: by}
	seen := map[string]int{}
	for _, b := range bundles {
		name := columnName(b, by)
		seen[name]++
		if seen[name] > 1 {
			name = fmt.Sprintf("%s (%d)", name, seen[name])
		}
		c.Columns = append(c.Columns, name)
	}
	refIdx := 0
	if ref != "" {
		refIdx = -1
		for i, col := range c.Columns {
			if col == ref || bundles[i].Name == ref {
				refIdx = i
				break
			}
		}
		if refIdx < 0 {
			return nil, fmt.Errorf("--ref %q: no such column (columns: %s)", ref, strings.Join(c.Columns, "; "))
		}
	}
	c.Ref = c.Columns[refIdx]
	// Lines in the questions' order, scopes in order of first appearance.
	type key struct{ q, scope string }
	var order []key
	cells := map[key][]Cell{}
	for i, b := range bundles {
		for _, l := range b.Sheet.Lines {
			k := key{l.Question, l.Scope}
			if _, ok := cells[k]; !ok {
				order = append(order, k)
				cells[k] = make([]Cell, len(bundles))
			}
			cells[k][i] = Cell{Verdict: l.Verdict, Key: l.Key}
		}
	}
	ids := evaluate.IDs()
	slices.SortStableFunc(order, func(a, b key) int {
		return rank(ids, a.q) - rank(ids, b.q)
	})
	for _, k := range order {
		row := cells[k]
		if r := row[refIdx].Key; r != nil && r.Value != 0 {
			for i := range row {
				if v := row[i].Key; v != nil && v.Name == r.Name {
					x := v.Value / r.Value
					if !math.IsNaN(x) && !math.IsInf(x, 0) {
						row[i].Ratio = &x
					}
				}
			}
		}
		c.Lines = append(c.Lines, Line{Question: k.q, Scope: k.scope, Cells: row})
	}
	return c, nil
}

func rank(ids []string, q string) int {
	if i := slices.Index(ids, q); i >= 0 {
		return i
	}
	return len(ids)
}

// columnName is a bundle's column: its environment's By fields, or its
// name where the environment says none of them.
func columnName(b *Bundle, by []string) string {
	var parts []string
	if b.Environment != nil {
		for _, f := range by {
			if v, _ := b.Environment.Get(f); v != "" {
				parts = append(parts, v)
			}
		}
	}
	if len(parts) == 0 {
		if b.Name != "" {
			return b.Name
		}
		return "unknown"
	}
	return strings.Join(parts, " ")
}

// Text is a cell as the table shows it: "holds 9400 Mbit/s ×0.93".
func (c Cell) Text() string {
	if c.Verdict == "" {
		return "-"
	}
	s := c.Verdict
	if c.Key != nil {
		s += " " + FormatFigure(*c.Key)
	}
	if c.Ratio != nil {
		s += fmt.Sprintf(" ×%.2f", *c.Ratio)
	}
	return s
}

// FormatFigure writes a headline figure in its unit.
func FormatFigure(f evaluate.Figure) string {
	switch f.Unit {
	case "bit/s":
		return fmt.Sprintf("%.0f Mbit/s", f.Value/1e6)
	case "%":
		return fmt.Sprintf("%.1f %%", f.Value)
	case "x":
		return fmt.Sprintf("%.1f×", f.Value)
	case "B":
		return fmt.Sprintf("%.0f B", f.Value)
	}
	return fmt.Sprintf("%.3g", f.Value)
}

// WriteText writes the comparison as aligned columns.
func (c *Comparison) WriteText(w io.Writer) error {
	head := append([]string{"question · scope"}, c.Columns...)
	var rows [][]string
	for _, l := range c.Lines {
		name := l.Question
		if l.Scope != "" {
			name += " · " + l.Scope
		}
		r := []string{name}
		for _, cell := range l.Cells {
			r = append(r, cell.Text())
		}
		rows = append(rows, r)
	}
	width := make([]int, len(head))
	for _, r := range append([][]string{head}, rows...) {
		for j, s := range r {
			width[j] = max(width[j], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "columns by %s; ratios against %s\n\n", strings.Join(c.By, ","), c.Ref)
	for _, r := range append([][]string{head}, rows...) {
		for j, s := range r {
			b.WriteString(s)
			if j < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[j]-utf8.RuneCountInString(s)+2))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the comparison as JSON.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}
