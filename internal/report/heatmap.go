package report

import (
	"fmt"
	"math"
)

// HeatMap lays out a matrix as coloured cells with their values printed.
// The colour runs from green (good) through yellow to red (bad) according
// to which way the metric is better; a metric that spans more than a
// factor of 20 is coloured on a log scale so small values stay apart.
func HeatMap(id string, m Matrix) *Chart {
	c := newChart(id, m.Title)
	mi := Info(m.Metric)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range m.Values {
		for _, v := range row {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if err := m.Validate(); err != nil || math.IsInf(lo, 1) {
		c.Empty = "no data"
		c.Desc = m.Title + ": no data"
		return c
	}
	logScale := lo > 0 && hi/lo > 20
	norm := func(v float64) float64 {
		if hi == lo {
			return 0.5
		}
		if logScale {
			return (math.Log(v) - math.Log(lo)) / (math.Log(hi) - math.Log(lo))
		}
		return (v - lo) / (hi - lo)
	}
	badness := func(v float64) float64 {
		t := norm(v)
		if mi.Better == Higher {
			t = 1 - t
		}
		return t
	}

	longest, longestCol := 0, 0
	for _, r := range m.Rows {
		longest = max(longest, len([]rune(r)))
	}
	for _, col := range m.Cols {
		longestCol = max(longestCol, len([]rune(col)))
	}
	// Cells shrink to fit the page's width down to minCell; a larger
	// matrix makes a wider chart (Wide: it scrolls) rather than cells too
	// small to see. Values are printed in cells wide enough for them, and
	// are in every cell's title.
	const minCell, textCell = 18.0, 40.0
	left := math.Max(90, 12+6.6*float64(longest))
	cellW := math.Max(minCell, math.Min(110, (chartW-left-150)/float64(max(len(m.Cols), 1))))
	cellH := 34.0
	if cellW < textCell {
		cellH = cellW
	}
	top := 74.0
	rotate := cellW < 6.6*float64(longestCol)+6
	if rotate { // column heads turned up, their length above the grid
		top = 50 + 0.87*6.6*float64(longestCol) + 10
	}
	c.W = left + cellW*float64(len(m.Cols)) + 150
	c.H = top + cellH*float64(len(m.Rows)) + 46
	c.Wide = c.W > chartW
	c.Plot = Rect{X: left, Y: top, W: cellW * float64(len(m.Cols)), H: cellH * float64(len(m.Rows))}
	f, unit := Scale(hi, mi.Unit)
	label := mi.Label
	if m.Label != "" {
		label = m.Label
	}
	c.Subtitle = fmt.Sprintf("%s in %s; rows: %s, columns: %s", label, unitOrCount(unit), m.RowLabel, m.ColLabel)
	for j, col := range m.Cols {
		h := Text{X: left + cellW*(float64(j)+0.5), Y: top - 8, Anchor: "middle", Text: col}
		if rotate {
			h.X, h.Anchor, h.Rotate = h.X+4, "start", true
		}
		c.ColHeads = append(c.ColHeads, h)
	}
	for i, row := range m.Rows {
		y := top + cellH*float64(i)
		c.RowHeads = append(c.RowHeads, Text{X: left - 8, Y: y + cellH/2 + 4, Anchor: "end", Text: row})
		for j, v := range m.Values[i] {
			x := left + cellW*float64(j)
			cell := Cell{X: x + 1, Y: y + 1, W: cellW - 2, H: cellH - 2, TX: x + cellW/2, TY: y + cellH/2 + 4}
			if math.IsNaN(v) {
				cell.Fill, cell.Text, cell.TextColor = "#f2f2f2", "–", "#888888"
				cell.Title = fmt.Sprintf("%s → %s: not measured", row, m.Cols[j])
			} else {
				t := badness(v)
				cell.Fill = rampColor(t)
				cell.TextColor = "#111111"
				cell.Text = sig3(v / f)
				cell.Title = fmt.Sprintf("%s → %s: %s", row, m.Cols[j], Format(v, mi.Unit))
			}
			if i < len(m.Marked) && j < len(m.Marked[i]) && m.Marked[i][j] {
				cell.Marked = true
				cell.Title += m.Mark
			}
			if cellW < textCell {
				cell.Text = ""
			}
			c.Cells = append(c.Cells, cell)
		}
	}
	// Colour bar: good at the bottom, bad at the top.
	bx, by, bh := c.Plot.X+c.Plot.W+24, top, math.Max(cellH*float64(len(m.Rows)), 90)
	if bh > c.H-top-46 {
		c.H = top + bh + 46
	}
	const steps = 20
	for k := 0; k < steps; k++ {
		t := 1 - (float64(k)+0.5)/steps
		c.ColorBar = append(c.ColorBar, Rect{X: bx, Y: by + bh*float64(k)/steps, W: 14, H: bh/steps + 0.5, Fill: rampColor(t)})
	}
	worst, best := hi, lo
	if mi.Better == Higher {
		worst, best = lo, hi
	}
	c.Texts = append(c.Texts,
		Text{X: bx + 18, Y: by + 10, Anchor: "start", Text: sig3(worst/f) + " worse", Class: "tick"},
		Text{X: bx + 18, Y: by + bh, Anchor: "start", Text: sig3(best/f) + " better", Class: "tick"})
	if logScale {
		c.Texts = append(c.Texts, Text{X: bx, Y: by + bh + 16, Anchor: "start", Text: "log colour scale", Class: "tick"})
	}
	c.Desc = fmt.Sprintf("%s: %d × %d cells", m.Title, len(m.Rows), len(m.Cols))
	return c
}

func unitOrCount(u string) string {
	if u == "" {
		return "count"
	}
	return u
}

// rampColor maps 0 (good) .. 1 (bad) onto green, yellow, red.
func rampColor(t float64) string {
	t = math.Max(0, math.Min(1, t))
	stops := [][3]float64{{26, 152, 80}, {145, 207, 96}, {254, 224, 139}, {252, 141, 89}, {215, 48, 39}}
	pos := t * float64(len(stops)-1)
	i := int(math.Floor(pos))
	if i >= len(stops)-1 {
		i = len(stops) - 2
	}
	f := pos - float64(i)
	var rgb [3]int
	for k := 0; k < 3; k++ {
		rgb[k] = int(math.Round(stops[i][k] + (stops[i+1][k]-stops[i][k])*f))
	}
	return fmt.Sprintf("#%02x%02x%02x", rgb[0], rgb[1], rgb[2])
}
