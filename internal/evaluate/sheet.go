package evaluate

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Header is the sheet's column heads, as Cells gives a line's cells.
var Header = []string{"question", "scope", "verdict", "figures", "reason"}

// Cells are a line's cells under Header.
func (l Line) Cells() []string {
	return []string{l.Question, dash(l.Scope), l.Verdict, dash(l.Figures), l.Reason}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Counts counts the lines per verdict word.
func (s Sheet) Counts() map[string]int {
	m := map[string]int{}
	for _, l := range s.Lines {
		m[l.Verdict]++
	}
	return m
}

// Summary is one line: the budget, the time taken and the verdicts.
func (s Sheet) Summary() string {
	c := s.Counts()
	var parts []string
	for _, w := range []string{Holds, Partial, Fails, Measured, Unknown, NotAsked} {
		if c[w] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c[w], w))
		}
	}
	return fmt.Sprintf("verdict sheet: %s (budget %s, took %s)", strings.Join(parts, ", "), round(s.Budget), round(s.Took))
}

// WriteText writes the sheet as aligned columns (question, scope,
// verdict, figures), each line's reason on an indented line below it.
func (s Sheet) WriteText(w io.Writer) error {
	head := []string{"QUESTION", "SCOPE", "VERDICT", "FIGURES"}
	width := make([]int, 3)
	rows := make([][]string, len(s.Lines))
	for i, l := range s.Lines {
		rows[i] = []string{l.Question, dash(l.Scope), strings.ToUpper(l.Verdict), dash(l.Figures)}
	}
	for _, r := range append([][]string{head}, rows...) {
		for j := range width {
			width[j] = max(width[j], utf8.RuneCountInString(r[j]))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", s.Summary())
	line := func(r []string) {
		for j := range width {
			b.WriteString(r[j] + strings.Repeat(" ", width[j]-utf8.RuneCountInString(r[j])+2))
		}
		b.WriteString(r[3] + "\n")
	}
	line(head)
	for i, l := range s.Lines {
		line(rows[i])
		fmt.Fprintf(&b, "%s↳ %s\n", strings.Repeat(" ", width[0]+2), l.Reason)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the sheet as a Markdown table.
func (s Sheet) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**\n\n| %s |\n|%s\n", s.Summary(), strings.Join(Header, " | "), strings.Repeat(" --- |", len(Header)))
	for _, l := range s.Lines {
		cells := l.Cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
