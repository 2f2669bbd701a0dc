package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cnperf/cnperf/internal/suite"
)

// Table is a rendered grid of strings: the suite's rows pivoted like the
// source studies' backend tables (one line per connection and metric, one
// column per backend).
type Table struct {
	Header []string
	Lines  [][]string
	// First marks lines that start a new connection (for rules between
	// groups).
	First []bool
}

// TableOptions choose what a table shows.
type TableOptions struct {
	// Metrics to show, in order; empty means every metric present.
	Metrics []string
	// Present is the suite's presentation (how its rows are named).
	Present suite.Presentation
}

// BuildTable pivots rows: for each connection, each metric on its own line
// with the median and min–max spread of every backend side by side.
func BuildTable(rows []suite.Row, opt TableOptions) Table {
	var backends []string
	seenB := map[string]bool{}
	var conns []string
	seenC := map[string]bool{}
	byKey := map[[2]string]suite.Row{}
	for _, r := range rows {
		if !seenB[r.Backend] {
			seenB[r.Backend] = true
			backends = append(backends, r.Backend)
		}
		name := opt.Present.RowName(r)
		if !seenC[name] {
			seenC[name] = true
			conns = append(conns, name)
		}
		byKey[[2]string{name, r.Backend}] = r
	}
	t := Table{Header: []string{"Connection", "Metric"}}
	for _, b := range backends {
		if b == "" {
			b = "value"
		}
		t.Header = append(t.Header, b)
	}
	for _, c := range conns {
		present := map[string]bool{}
		var path string
		var errs []string
		for _, b := range backends {
			r, ok := byKey[[2]string{c, b}]
			if !ok {
				continue
			}
			if path == "" && (r.Src != "" || r.Dst != "") {
				path = r.Src + " → " + r.Dst
			}
			for m := range r.Median {
				present[m] = true
			}
			for _, e := range r.Errors {
				errs = append(errs, backendPrefix(b)+e)
			}
		}
		metrics := opt.Metrics
		if len(metrics) == 0 {
			names := make([]string, 0, len(present))
			for m := range present {
				names = append(names, m)
			}
			metrics = sortMetrics(names)
		}
		first := true
		for _, m := range metrics {
			if !present[m] {
				continue
			}
			mi := Info(m)
			line := []string{"", mi.Label}
			if first {
				line[0] = c
			} else if path != "" && len(t.Lines) > 0 && t.First[len(t.First)-1] {
				line[0] = "  " + path
			}
			for _, b := range backends {
				r, ok := byKey[[2]string{c, b}]
				v, ok2 := r.Median[m]
				if !ok || !ok2 {
					line = append(line, "–")
					continue
				}
				line = append(line, FormatRange(v, valueOr(r.Min, m), valueOr(r.Max, m), mi.Unit))
			}
			t.Lines = append(t.Lines, line)
			t.First = append(t.First, first)
			first = false
		}
		for _, e := range errs {
			line := make([]string, len(t.Header))
			line[0], line[1] = c, "error: "+e
			if !first {
				line[0] = ""
			}
			t.Lines = append(t.Lines, line)
			t.First = append(t.First, first)
			first = false
		}
	}
	return t
}

func backendPrefix(b string) string {
	if b == "" {
		return ""
	}
	return b + ": "
}

func valueOr(m map[string]float64, k string) float64 {
	if v, ok := m[k]; ok {
		return v
	}
	return math.NaN()
}

// WriteText writes the table aligned for a terminal, with a rule under the
// header and between connections.
func (t Table) WriteText(w io.Writer) error {
	widths := make([]int, len(t.Header))
	for i, h := range t.Header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, l := range t.Lines {
		for i, c := range l {
			if n := utf8.RuneCountInString(c); n > widths[i] {
				widths[i] = n
			}
		}
	}
	var b strings.Builder
	rule := func() {
		for i, wd := range widths {
			if i > 0 {
				b.WriteString("-+-")
			}
			b.WriteString(strings.Repeat("-", wd))
		}
		b.WriteString("\n")
	}
	row := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(c)
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
			}
		}
		b.WriteString("\n")
	}
	row(t.Header)
	rule()
	for i, l := range t.Lines {
		if i > 0 && t.First[i] {
			rule()
		}
		row(l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the table as a GitHub-flavoured markdown table.
func (t Table) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	b.WriteString("|")
	for _, h := range t.Header {
		fmt.Fprintf(&b, " %s |", esc(h))
	}
	b.WriteString("\n|")
	for i := range t.Header {
		if i < 2 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	for _, l := range t.Lines {
		b.WriteString("|")
		for _, c := range l {
			fmt.Fprintf(&b, " %s |", esc(c))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Title returns the report's one-line heading: run, suite, status and
// progress.
func (r *Report) Title() string {
	s := fmt.Sprintf("run %s · %s · %s", r.RunID, r.Suite, r.Status)
	if r.Progress.Total > 0 {
		s += fmt.Sprintf(" (%d/%d measurements)", r.Progress.Done, r.Progress.Total)
	}
	return s
}

// settings is the line of the run's settings and runs, or "".
func (r *Report) settings() string {
	var parts []string
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+" "+r.Params[k])
	}
	if len(r.RunIDs) > 1 {
		parts = append(parts, fmt.Sprintf("%d runs (%s)", len(r.RunIDs), shortRuns(r.RunIDs)))
	}
	return strings.Join(parts, " · ")
}

// shortRuns names the first and last run of many.
func shortRuns(ids []string) string {
	if len(ids) <= 2 {
		return strings.Join(ids, ", ")
	}
	return ids[0] + " … " + ids[len(ids)-1]
}

// list is a titled list of lines.
type list struct {
	title string
	lines []string
}

// lists are what follows the tables: failed steps (the pivot carries them
// in its lines), the suite's verdicts and the SLO checks.
func (r *Report) lists(sections []Section) []list {
	var out []list
	pivoted := true
	for _, s := range sections {
		pivoted = pivoted && s.Pivoted
	}
	if f := r.failures(); len(f) > 0 && !pivoted {
		out = append(out, list{"failed steps", f})
	}
	if h := r.Present.Series; h != nil {
		if l, ok := r.seriesList(*h); ok {
			out = append(out, l)
		}
	}
	if len(r.Conclusions) > 0 {
		out = append(out, list{"verdicts", r.Conclusions})
	}
	if len(r.Checks) > 0 {
		var lines []string
		for _, c := range r.Checks {
			lines = append(lines, c.Line())
		}
		out = append(out, list{"SLO", lines})
	}
	return out
}

// seriesList writes the first second of each row's series (shaping's
// receiver rate per 100 ms), scaled to one unit.
func (r *Report) seriesList(h suite.SeriesHint) (list, bool) {
	n := 1
	if h.Interval > 0 && h.Interval < time.Second {
		n = int(time.Second / h.Interval)
	}
	top := 0.0
	for _, row := range r.Rows {
		for _, v := range row.Series[h.Series] {
			top = math.Max(top, math.Abs(v))
		}
	}
	f, unit := Scale(top, Info(h.Series).Unit)
	l := list{title: fmt.Sprintf("%s per %v, first %v (%s)", h.Series, h.Interval, time.Duration(n)*h.Interval, unit)}
	for _, row := range r.Rows {
		ser := row.Series[h.Series]
		if len(ser) == 0 {
			continue
		}
		parts := make([]string, min(n, len(ser)))
		for i := range parts {
			parts[i] = strconv.FormatFloat(ser[i]/f, 'f', 1, 64)
		}
		l.lines = append(l.lines, r.Present.RowName(row)+": "+strings.Join(parts, " "))
	}
	return l, len(l.lines) > 0
}

// WriteText writes the report for a terminal: its heading, settings,
// environment and notes, the tables, then failed steps, verdicts and SLO
// checks.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString(r.Title() + "\n")
	if s := r.settings(); s != "" {
		b.WriteString(s + "\n")
	}
	for _, l := range EnvironmentLines(r.Environment) {
		b.WriteString(l + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if !r.Finished() {
		fmt.Fprintf(&b, "in progress: %.0f %% done; figures below are partial\n", r.Progress.Percent())
	}
	if len(r.Rows) == 0 {
		b.WriteString("\nno results yet\n")
	}
	sections := r.Sections()
	for _, s := range sections {
		b.WriteString("\n")
		if s.Title != "" {
			b.WriteString(s.Title + "\n")
		}
		if err := s.Table.WriteText(&b); err != nil {
			return err
		}
	}
	for _, l := range r.lists(sections) {
		b.WriteString("\n" + l.title + ":\n")
		for _, line := range l.lines {
			b.WriteString("  " + line + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the report as GitHub-flavoured Markdown, laid out
// as WriteText.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# cnperf %s\n\n", r.Title())
	if s := r.settings(); s != "" {
		b.WriteString(s + "\n\n")
	}
	for _, l := range EnvironmentLines(r.Environment) {
		b.WriteString("> " + strings.TrimSpace(l) + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("> " + n + "\n")
	}
	if len(EnvironmentLines(r.Environment)) > 0 || len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	if !r.Finished() {
		fmt.Fprintf(&b, "_In progress: %.0f %% done; figures are partial._\n\n", r.Progress.Percent())
	}
	if len(r.Rows) == 0 {
		b.WriteString("No results yet.\n")
	} else {
		b.WriteString("Each figure is the median of the repetitions, their min–max in brackets.\n")
	}
	sections := r.Sections()
	for _, s := range sections {
		b.WriteString("\n")
		if s.Title != "" {
			b.WriteString("### " + s.Title + "\n\n")
		}
		if err := s.Table.WriteMarkdown(&b); err != nil {
			return err
		}
	}
	for _, l := range r.lists(sections) {
		b.WriteString("\n**" + l.title + "**\n\n")
		for _, line := range l.lines {
			b.WriteString("- " + strings.ReplaceAll(line, "|", `\|`) + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
