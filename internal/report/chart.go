package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Chart is an SVG chart laid out in pixels, ready for the svg template:
// the builders below do all arithmetic, the template only draws.
type Chart struct {
	ID       string
	Title    string
	Subtitle string
	W, H     float64
	Plot     Rect
	XLabel   string
	YLabel   string
	XTicks   []Tick
	YTicks   []Tick
	// XCats are category labels under bars (no grid line).
	XCats    []Tick
	Legend   []LegendItem
	Lines    []Line
	Markers  []Marker
	Bars     []Bar
	Whiskers []Whisker
	Cells    []Cell
	Texts    []Text
	RowHeads []Text
	ColHeads []Text
	ColorBar []Rect // colour bar steps of a heat map
	// Wide charts (a large heat map) keep their size and scroll instead
	// of shrinking to the page's column.
	Wide  bool
	Desc  string // what the chart shows, for screen readers
	Empty string // shown instead of the plot when there is nothing to draw
}

// Rect is a rectangle in pixels, with an optional fill.
type Rect struct {
	X, Y, W, H float64
	Fill       string
}

// Tick is an axis tick at a pixel position.
type Tick struct {
	Pos   float64
	Label string
}

// LegendItem is one legend entry.
type LegendItem struct {
	X, Y  float64
	Color string
	Dash  bool
	Label string
}

// Line is a polyline; Fill draws the area under it.
type Line struct {
	D     string // SVG path data
	Color string
	Width float64
	Dash  bool
	Area  string // path data of the filled area, or empty
	Label string
}

// Marker is a point on a line.
type Marker struct {
	X, Y  float64
	Color string
	Title string
}

// Bar is one bar.
type Bar struct {
	X, Y, W, H float64
	Color      string
	Title      string // tooltip: label and exact value
	Value      string // printed above the bar
	VX, VY     float64
}

// Whisker is a min–max range drawn on a bar.
type Whisker struct {
	X, Y1, Y2, Half float64
}

// Cell is one heat-map cell.
type Cell struct {
	X, Y, W, H float64
	Fill       string
	Text       string
	TextColor  string
	TX, TY     float64
	Title      string
	Marked     bool // outlined (a matrix's Marked cell)
}

// Text is a free label.
type Text struct {
	X, Y   float64
	Anchor string // start, middle, end
	Text   string
	Class  string
	Rotate bool
}

// palette is Okabe and Ito's colour-blind safe set (yellow left out: it
// is unreadable on white).
var palette = [...]string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D31", "#555555"}

func colorAt(i int) string { return palette[i%len(palette)] }

const (
	chartW   = 720.0
	chartH   = 320.0
	padLeft  = 70.0
	padRight = 20.0
	padTop   = 70.0 // title, subtitle and legend
	padBot   = 50.0 // x ticks and label
)

func newChart(id, title string) *Chart {
	return &Chart{ID: id, Title: title, W: chartW, H: chartH,
		Plot: Rect{X: padLeft, Y: padTop, W: chartW - padLeft - padRight, H: chartH - padTop - padBot}}
}

// layoutLegend places legend items in rows under the title.
func (c *Chart) layoutLegend(items []LegendItem) {
	x, y := c.Plot.X, 50.0
	for _, it := range items {
		w := 26 + 6.5*float64(len([]rune(it.Label)))
		if x+w > c.W-padRight && x > c.Plot.X {
			x = c.Plot.X
			y += 16
		}
		it.X, it.Y = x, y
		c.Legend = append(c.Legend, it)
		x += w + 14
	}
	if extra := y - 50; extra > 0 {
		c.Plot.Y += extra
		c.Plot.H -= extra
	}
}

// axis maps data values to pixels along one dimension.
type axis struct {
	lo, hi   float64 // data range
	p0, p1   float64 // pixel range (p0 for lo)
	scale    float64 // display divisor (1e9 for Gbit/s)
	ticks    []float64
	step     float64
	unitText string
}

func newAxis(lo, hi, p0, p1 float64, unit string, n int) axis {
	f, u := Scale(math.Max(math.Abs(lo), math.Abs(hi)), unit)
	nlo, nhi, ticks := niceRange(lo/f, hi/f, n)
	a := axis{lo: nlo * f, hi: nhi * f, p0: p0, p1: p1, scale: f, unitText: u}
	for _, t := range ticks {
		a.ticks = append(a.ticks, t*f)
	}
	if len(ticks) > 1 {
		a.step = ticks[1] - ticks[0]
	}
	return a
}

func (a axis) px(v float64) float64 {
	if a.hi == a.lo {
		return a.p0
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

func (a axis) tickMarks() []Tick {
	out := make([]Tick, 0, len(a.ticks))
	for _, t := range a.ticks {
		out = append(out, Tick{Pos: a.px(t), Label: tickLabel(t/a.scale, a.step)})
	}
	return out
}

func axisLabel(name, unit string) string {
	if unit == "" {
		return name
	}
	return name + " (" + unit + ")"
}

// pathD writes SVG path data through the points, skipping NaN gaps.
func pathD(xs, ys []float64) string {
	var b strings.Builder
	pen := false
	for i := range xs {
		if math.IsNaN(xs[i]) || math.IsNaN(ys[i]) {
			pen = false
			continue
		}
		if pen {
			b.WriteString(" L")
		} else {
			if b.Len() > 0 {
				b.WriteString(" ")
			}
			b.WriteString("M")
		}
		b.WriteString(fx(xs[i]) + " " + fx(ys[i]))
		pen = true
	}
	return b.String()
}

// fx formats a pixel coordinate with one decimal.
func fx(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func formatFixed(v float64, decimals int) string {
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// Series is one line of a line chart, in data units.
type Series struct {
	Name string
	X, Y []float64
}

// RefLine is a horizontal reference line, such as a shaping limit.
type RefLine struct {
	Y     float64
	Label string
}

// LineSpec describes a line chart.
type LineSpec struct {
	ID, Title, Subtitle string
	XName, XUnit        string
	YName, YUnit        string
	Series              []Series
	Refs                []RefLine
	// Markers draws a dot on every point (for short series).
	Markers bool
	// Step draws each point as a flat step to the next (histograms).
	Step bool
	// Area fills under each line, lightly.
	Area bool
	// YMax fixes the top of the y axis (CDFs: 100); 0 means from the data.
	YMax float64
	// YCap bounds the top of an axis taken from the data (shares of
	// samples: 100 %); 0 means none.
	YCap float64
}

// LineChart lays out a line chart. The y axis starts at zero.
func LineChart(s LineSpec) *Chart {
	c := newChart(s.ID, s.Title)
	c.Subtitle = s.Subtitle
	xlo, xhi := math.Inf(1), math.Inf(-1)
	yhi := 0.0
	n := 0
	for _, se := range s.Series {
		for i := range se.X {
			if math.IsNaN(se.X[i]) || math.IsNaN(se.Y[i]) {
				continue
			}
			xlo, xhi = math.Min(xlo, se.X[i]), math.Max(xhi, se.X[i])
			yhi = math.Max(yhi, se.Y[i])
			n++
		}
	}
	for _, r := range s.Refs {
		yhi = math.Max(yhi, r.Y)
	}
	if s.YMax > 0 {
		yhi = s.YMax
	}
	var legend []LegendItem
	for i, se := range s.Series {
		legend = append(legend, LegendItem{Color: colorAt(i), Label: se.Name})
	}
	for _, r := range s.Refs {
		legend = append(legend, LegendItem{Color: "#C00000", Dash: true, Label: r.Label})
	}
	c.layoutLegend(legend)
	if n == 0 {
		c.Empty = "no data"
		c.Desc = s.Title + ": no data"
		return c
	}
	if xlo > 0 && xlo < (xhi-xlo)*0.5 {
		xlo = 0
	}
	xa := newAxis(xlo, xhi, c.Plot.X, c.Plot.X+c.Plot.W, s.XUnit, 8)
	top := yhi * 1.05
	if s.YCap > 0 && top > s.YCap {
		top = s.YCap
	}
	ya := newAxis(0, top, c.Plot.Y+c.Plot.H, c.Plot.Y, s.YUnit, 5)
	if s.YCap > 0 && ya.hi > s.YCap {
		ya = newAxis(0, s.YCap, c.Plot.Y+c.Plot.H, c.Plot.Y, s.YUnit, 5)
	}
	if s.YMax > 0 {
		ya = newAxis(0, s.YMax, c.Plot.Y+c.Plot.H, c.Plot.Y, s.YUnit, 5)
	}
	c.XTicks, c.YTicks = xa.tickMarks(), ya.tickMarks()
	c.XLabel, c.YLabel = axisLabel(s.XName, xa.unitText), axisLabel(s.YName, ya.unitText)
	base := fx(ya.px(0))
	for i, se := range s.Series {
		var xs, ys []float64
		for j := range se.X {
			x, y := xa.px(se.X[j]), ya.px(se.Y[j])
			if s.Step && j > 0 && !math.IsNaN(se.Y[j-1]) {
				xs, ys = append(xs, x), append(ys, ya.px(se.Y[j-1]))
			}
			xs, ys = append(xs, x), append(ys, y)
			if s.Markers && !math.IsNaN(se.Y[j]) {
				c.Markers = append(c.Markers, Marker{X: x, Y: y, Color: colorAt(i),
					Title: fmt.Sprintf("%s: %s at %s", se.Name, Format(se.Y[j], s.YUnit), Format(se.X[j], s.XUnit))})
			}
		}
		l := Line{D: pathD(xs, ys), Color: colorAt(i), Width: 2, Label: se.Name}
		if s.Area && l.D != "" {
			first, last := firstValid(xs, ys), lastValid(xs, ys)
			l.Area = "M" + fx(first) + " " + base + " " + strings.TrimPrefix(l.D, "M") + " L" + fx(last) + " " + base + " Z"
		}
		c.Lines = append(c.Lines, l)
	}
	for _, r := range s.Refs {
		y := ya.px(r.Y)
		c.Lines = append(c.Lines, Line{D: "M" + fx(c.Plot.X) + " " + fx(y) + " L" + fx(c.Plot.X+c.Plot.W) + " " + fx(y),
			Color: "#C00000", Width: 1.5, Dash: true, Label: r.Label})
		c.Texts = append(c.Texts, Text{X: c.Plot.X + c.Plot.W - 4, Y: y - 5, Anchor: "end", Text: r.Label, Class: "ref"})
	}
	c.Desc = fmt.Sprintf("%s: %d series, x %s, y %s", s.Title, len(s.Series), c.XLabel, c.YLabel)
	return c
}

func firstValid(xs, ys []float64) float64 {
	for i := range xs {
		if !math.IsNaN(ys[i]) {
			return xs[i]
		}
	}
	return 0
}

func lastValid(xs, ys []float64) float64 {
	for i := len(xs) - 1; i >= 0; i-- {
		if !math.IsNaN(ys[i]) {
			return xs[i]
		}
	}
	return 0
}

// BarSpec describes a grouped bar chart: one cluster per category, one
// bar per group inside it, with optional min–max whiskers.
type BarSpec struct {
	ID, Title, Subtitle string
	YName, YUnit        string
	Categories          []string
	Groups              []string
	Values              [][]float64 // [group][category], NaN when absent
	Lo, Hi              [][]float64 // optional spread, same shape
}

// BarChart lays out a grouped bar chart. The y axis starts at zero.
func BarChart(s BarSpec) *Chart {
	c := newChart(s.ID, s.Title)
	c.Subtitle = s.Subtitle
	var legend []LegendItem
	for i, g := range s.Groups {
		if g == "" {
			g = "value"
		}
		legend = append(legend, LegendItem{Color: colorAt(i), Label: g})
	}
	if len(s.Groups) > 1 {
		c.layoutLegend(legend)
	}
	yhi, n := 0.0, 0
	for gi := range s.Values {
		for ci, v := range s.Values[gi] {
			if math.IsNaN(v) {
				continue
			}
			n++
			yhi = math.Max(yhi, v)
			if s.Hi != nil && !math.IsNaN(s.Hi[gi][ci]) {
				yhi = math.Max(yhi, s.Hi[gi][ci])
			}
		}
	}
	if n == 0 || len(s.Categories) == 0 {
		c.Empty = "no data"
		c.Desc = s.Title + ": no data"
		return c
	}
	ya := newAxis(0, yhi*1.12, c.Plot.Y+c.Plot.H, c.Plot.Y, s.YUnit, 5)
	c.YTicks = ya.tickMarks()
	c.YLabel = axisLabel(s.YName, ya.unitText)
	slot := c.Plot.W / float64(len(s.Categories))
	inner := slot * 0.7
	bw := math.Min(inner/float64(max(len(s.Groups), 1)), 90)
	for ci, cat := range s.Categories {
		x0 := c.Plot.X + slot*float64(ci) + (slot-bw*float64(len(s.Groups)))/2
		c.XCats = append(c.XCats, Tick{Pos: c.Plot.X + slot*(float64(ci)+0.5), Label: cat})
		for gi := range s.Groups {
			v := s.Values[gi][ci]
			if math.IsNaN(v) {
				continue
			}
			x := x0 + bw*float64(gi)
			top := ya.px(v)
			title := fmt.Sprintf("%s, %s: %s", cat, legendName(s.Groups[gi]), Format(v, s.YUnit))
			// The value over the bar, in the axis's unit, when it fits.
			label := sig3(v / ya.scale)
			if 6.2*float64(len(label)) > bw+4 {
				label = ""
			}
			b := Bar{X: x + 1, Y: top, W: bw - 2, H: ya.px(0) - top, Color: colorAt(gi), Value: label, VX: x + bw/2, VY: top - 4}
			if s.Lo != nil && s.Hi != nil && !math.IsNaN(s.Lo[gi][ci]) && s.Lo[gi][ci] != s.Hi[gi][ci] {
				w := Whisker{X: x + bw/2, Y1: ya.px(s.Lo[gi][ci]), Y2: ya.px(s.Hi[gi][ci]), Half: math.Min(bw/4, 8)}
				c.Whiskers = append(c.Whiskers, w)
				b.VY = math.Min(top, w.Y2) - 4
				title += fmt.Sprintf(" (min %s, max %s)", Format(s.Lo[gi][ci], s.YUnit), Format(s.Hi[gi][ci], s.YUnit))
			}
			b.Title = title
			c.Bars = append(c.Bars, b)
		}
	}
	c.Desc = fmt.Sprintf("%s: %d categories, %d groups, %s", s.Title, len(s.Categories), len(s.Groups), c.YLabel)
	return c
}

func legendName(g string) string {
	if g == "" {
		return "value"
	}
	return g
}
