package report

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// Better says which direction of a metric is an improvement.
type Better int

// Directions of improvement.
const (
	Neutral Better = iota // a change is neither good nor bad (bytes moved in a fixed time)
	Higher
	Lower
)

// MetricInfo describes how a metric is shown and judged.
type MetricInfo struct {
	Name   string // dotted probe name, e.g. "throughput_bps.receiver"
	Label  string // human label, e.g. "TCP throughput (receiver)"
	Unit   string // base unit: "bit/s", "ms", "%", "B", "pkt/s", "tx/s", ""
	Better Better
}

// Info returns what is known about a metric: the label and unit of the
// figure its measurement's kind gives it (suite.Figures), else what its
// name says (every name in cnperf carries its unit), so a suite's own
// figures still get a unit and direction.
func Info(name string) MetricInfo {
	mi := MetricInfo{Name: name, Label: strings.ReplaceAll(name, "_", " ")}
	switch {
	case strings.Contains(name, "throughput_bps"), strings.HasSuffix(name, "_bps"):
		mi.Unit, mi.Better = "bit/s", Higher
	case strings.Contains(name, "bytes"):
		mi.Unit, mi.Better = "B", Neutral
	case strings.Contains(name, "loss_pct"), strings.Contains(name, "cpu_pct"):
		mi.Unit, mi.Better = "%", Lower
	case strings.HasSuffix(name, "_ms") || strings.Contains(name, "_ms."):
		mi.Unit, mi.Better = "ms", Lower
	case strings.Contains(name, "transactions_per_s"):
		mi.Unit, mi.Better = "tx/s", Higher
	case strings.HasSuffix(name, "pps"):
		mi.Unit, mi.Better = "pkt/s", Higher
	case strings.Contains(name, "retransmits"):
		mi.Unit, mi.Better = "", Lower
	case strings.HasSuffix(name, "age_h"):
		mi.Unit, mi.Better = "h", Lower
	}
	if f, ok := suite.FigureOf(name); ok {
		mi.Label, mi.Unit = f.Label, f.Unit
	}
	return mi
}

// sortMetrics orders names as suite.Figures lists them, then
// alphabetically.
func sortMetrics(names []string) []string {
	rank := map[string]int{}
	for i, f := range suite.Figures() {
		rank[f.Name] = i
	}
	out := append([]string(nil), names...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		ra, oka := rank[a]
		rb, okb := rank[b]
		switch {
		case oka && okb:
			return ra < rb
		case oka != okb:
			return oka
		}
		return a < b
	})
	return out
}

// siPrefixes for bit/s, B and pkt/s.
var siPrefixes = []struct {
	f float64
	p string
}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}

// Scale picks a display multiplier and unit for values up to max in unit:
// 4.28e9 bit/s → (1e9, "Gbit/s"), 0.03 ms → (1e-3, "µs"), 2e-5 ms → (1e-6,
// "ns"). Units without
// scaling return (1, unit).
func Scale(max float64, unit string) (float64, string) {
	switch unit {
	case "bit/s", "B", "pkt/s", "tx/s":
	case "ms":
		// Container networks answer in microseconds, and jitter on a
		// quiet path in nanoseconds: show them so (13.1 µs, 17.6 ns,
		// never 0.0176 µs).
		switch a := math.Abs(max); {
		case a > 0 && a < 1e-3:
			return 1e-6, "ns"
		case a > 0 && a < 1:
			return 1e-3, "µs"
		}
		return 1, unit
	default:
		return 1, unit
	}
	a := math.Abs(max)
	for _, s := range siPrefixes {
		if a >= s.f {
			return s.f, s.p + unit
		}
	}
	return 1, unit
}

// Format writes v in unit with three significant digits and an SI prefix
// where the unit takes one: "4.28 Gbit/s", "19.0 µs", "7.50 %".
func Format(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	f, u := Scale(v, unit)
	s := scaled(v, f, u)
	if u == "" {
		return s
	}
	if u == "%" {
		return s + " %"
	}
	return s + " " + u
}

// scaled formats v/f; counts (no unit) that are whole print as integers.
func scaled(v, f float64, unit string) string {
	if unit == "" && v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return sig3(v / f)
}

// sig3 formats v with three significant digits, without exponent for the
// ranges networks produce, and integers without decimals.
func sig3(v float64) string {
	if v == 0 {
		return "0"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e6 && math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	a := math.Abs(v)
	digits := 2 - int(math.Floor(math.Log10(a)))
	if digits < 0 {
		digits = 0
	}
	if digits > 6 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// FormatRange writes a median with its min-max spread: "4.28 Gbit/s
// (4.10–4.40)"; the spread is left out when it is a single value.
func FormatRange(med, lo, hi float64, unit string) string {
	s := Format(med, unit)
	if math.IsNaN(lo) || math.IsNaN(hi) || lo == hi {
		return s
	}
	f, _ := Scale(med, unit)
	_, u := Scale(med, unit)
	l, h := scaled(lo, f, u), scaled(hi, f, u)
	if l == h {
		return s
	}
	return fmt.Sprintf("%s (%s–%s)", s, l, h)
}
