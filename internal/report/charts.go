package report

import (
	"fmt"
	"math"
	"sort"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
	"github.com/cnperf/cnperf/internal/suite"
)

// Charts builds every chart the report's data supports, in reading order:
// comparisons of paths or backends first, then series over time,
// distributions, matrices and shaping.
func (r *Report) Charts() []*Chart {
	var out []*Chart
	// One bar chart per kind of result, its figures named by the kind
	// (suite.Figures), so no result is drawn as another kind's.
	for _, b := range []struct {
		id, title, y, sub string
		metrics           []string
	}{
		{"bars-throughput", "TCP throughput by connection", "Throughput", "median at the receiver; whiskers: min–max of the repetitions", []string{"throughput_bps.receiver"}},
		{"bars-udp", "UDP throughput by connection", "Throughput", "median at the receiver; whiskers: min–max of the repetitions", []string{"udp.throughput_bps.receiver"}},
		{"bars-rtt", "Request/response round trip by connection", "Round trip", "median of the repetitions' p50 and p99; whiskers: min–max", []string{"rtt_ms.p50", "rtt_ms.p99"}},
		{"bars-ping", "Ping round trip by connection", "Round trip", "median of the repetitions' avg and p99; whiskers: min–max", []string{"ping.rtt_ms.avg", "ping.rtt_ms.p99"}},
	} {
		if c := r.barChart(b.id, b.title, b.y, b.metrics); c != nil {
			c.Subtitle = b.sub
			out = append(out, c)
		}
	}
	if c := r.throughputOverTime(); c != nil {
		out = append(out, c)
	}
	out = append(out, r.latencyCharts()...)
	for i, m := range r.Matrices {
		out = append(out, HeatMap(fmt.Sprintf("matrix-%d", i+1), m))
	}
	for i, s := range r.Shaping {
		out = append(out, ShapingChart(fmt.Sprintf("shaping-%d", i+1), s))
	}
	return out
}

// barChart compares metrics across connections, one bar per backend (and
// metric, when there are several).
func (r *Report) barChart(id, title, yname string, metrics []string) *Chart {
	var conns, backends []string
	seenC, seenB := map[string]bool{}, map[string]bool{}
	rows := map[[2]string]suite.Row{}
	found := false
	for _, row := range r.Rows {
		has := false
		for _, m := range metrics {
			_, ok := row.Median[m]
			has = has || ok
		}
		if !has {
			continue // a row of another kind of result is not drawn here
		}
		found = true
		name := r.Present.RowName(row)
		if !seenC[name] {
			seenC[name] = true
			conns = append(conns, name)
		}
		if !seenB[row.Backend] {
			seenB[row.Backend] = true
			backends = append(backends, row.Backend)
		}
		rows[[2]string{name, row.Backend}] = row
	}
	// More than a handful of clusters is unreadable as bars; the table
	// (and a suite's matrix) shows them.
	if !found || len(conns) > maxCategories {
		return nil
	}
	spec := BarSpec{ID: id, Title: title, YName: yname, YUnit: Info(metrics[0]).Unit, Categories: conns}
	for _, b := range backends {
		for _, m := range metrics {
			g := b
			if len(metrics) > 1 {
				q := m[len(m)-3:]
				if b == "" {
					g = q
				} else {
					g = b + " " + q
				}
			}
			spec.Groups = append(spec.Groups, g)
			var vs, lo, hi []float64
			for _, c := range conns {
				row, ok := rows[[2]string{c, b}]
				v, ok2 := row.Median[m]
				if !ok || !ok2 {
					vs, lo, hi = append(vs, math.NaN()), append(lo, math.NaN()), append(hi, math.NaN())
					continue
				}
				vs, lo, hi = append(vs, v), append(lo, valueOr(row.Min, m)), append(hi, valueOr(row.Max, m))
			}
			spec.Values, spec.Lo, spec.Hi = append(spec.Values, vs), append(spec.Lo, lo), append(spec.Hi, hi)
		}
	}
	return BarChart(spec)
}

// Bounds that keep charts readable: beyond them a chart is left out and
// the tables carry the figures.
const (
	maxCategories = 8
	maxSeries     = 8
)

// seriesName names an outcome's line in a legend.
func (r *Report) seriesName(o suite.Outcome) string {
	name := o.Step.Connection
	if name == "" {
		name = o.Step.Src.Name + " → " + o.Step.Dst.Name
	}
	if len(o.Step.Labels) > 0 {
		name = r.Present.RowName(suite.Row{Connection: name, Labels: o.Step.Labels})
	}
	if o.Step.Backend != "" {
		name = o.Step.Backend + ", " + name
	}
	return name
}

// throughputOverTime draws the interval reports of each connection's
// first TCP repetition that has them.
func (r *Report) throughputOverTime() *Chart {
	var series []Series
	seen := map[string]bool{}
	for _, o := range r.Outcomes {
		if o.Result == nil || o.Result.Kind != probe.KindTCP || len(o.Result.Intervals) == 0 {
			continue
		}
		name := r.seriesName(o)
		if seen[name] {
			continue
		}
		seen[name] = true
		series = append(series, intervalSteps(name, o.Result.Intervals))
	}
	if len(series) == 0 || len(series) > maxSeries {
		return nil
	}
	return LineChart(LineSpec{ID: "throughput-time", Title: "TCP throughput over time",
		Subtitle: "interval reports of each connection's first repetition, each drawn over its interval",
		XName:    "Time", XUnit: "s", YName: "Throughput", YUnit: "bit/s", Series: series})
}

// intervalSteps draws each interval's throughput as a flat segment over
// the interval, so short tests with few intervals still span their time.
func intervalSteps(name string, ivs []probe.Interval) Series {
	s := Series{Name: name}
	for _, iv := range ivs {
		s.X = append(s.X, iv.StartS, iv.EndS)
		s.Y = append(s.Y, iv.ThroughputBps, iv.ThroughputBps)
	}
	return s
}

// distribution is one latency distribution to draw.
type distribution struct {
	name    string
	what    string // "round trip" (rr), "one-way delay" (udp) or "ping round trip"
	widthUs float64
	counts  []int64
	summary *stats.Summary
}

func (r *Report) distributions() []distribution {
	var out []distribution
	idx := map[string]int{}
	for _, o := range r.Outcomes {
		res := o.Result
		if res == nil {
			continue
		}
		var what string
		var sum *stats.Summary
		switch {
		case res.Kind == probe.KindRR && res.RTTms != nil:
			what, sum = "round trip", res.RTTms
		case res.Kind == probe.KindUDP && res.LatencyMs != nil:
			what, sum = "one-way delay", res.LatencyMs
		case res.Kind == probe.KindPing && res.RTTms != nil:
			what, sum = "ping round trip", res.RTTms
		default:
			continue
		}
		name := r.seriesName(o)
		key := what + "\x00" + name
		i, ok := idx[key]
		if !ok {
			idx[key] = len(out)
			d := distribution{name: name, what: what, summary: sum}
			if res.Histogram != nil && res.Histogram.BinWidthUs > 0 {
				d.widthUs = res.Histogram.BinWidthUs
				d.counts = append([]int64(nil), res.Histogram.Counts...)
			}
			out = append(out, d)
			continue
		}
		// Later repetitions add their counts when the bins match.
		d := &out[i]
		if h := res.Histogram; h != nil && h.BinWidthUs == d.widthUs && len(h.Counts) == len(d.counts) {
			for k, c := range h.Counts {
				d.counts[k] += c
			}
		}
	}
	return out
}

// latencyCharts draws, per kind of latency, a histogram (when the probes
// kept one) and a CDF (from the histogram, else from the percentiles).
func (r *Report) latencyCharts() []*Chart {
	dists := r.distributions()
	var out []*Chart
	for _, what := range []string{"round trip", "one-way delay", "ping round trip"} {
		var ds []distribution
		for _, d := range dists {
			if d.what == what {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 || len(ds) > maxSeries {
			continue
		}
		slug := map[string]string{"round trip": "rtt", "one-way delay": "owd", "ping round trip": "ping"}[what]
		title := map[string]string{"round trip": "Request/response round trip", "one-way delay": "UDP one-way delay", "ping round trip": "Ping round trip"}[what]
		if h := histogramChart("hist-"+slug, title+": histogram", ds); h != nil {
			out = append(out, h)
		}
		out = append(out, cdfChart("cdf-"+slug, title+": CDF", ds))
	}
	return out
}

// histRange returns the number of bins to show: up to where every series
// has the share q of its samples, plus a margin.
func histRange(ds []distribution, q float64) int {
	n := 0
	for _, d := range ds {
		var total int64
		for _, c := range d.counts {
			total += c
		}
		var cum int64
		for i, c := range d.counts {
			cum += c
			if float64(cum) >= q*float64(total) {
				n = max(n, i+1)
				break
			}
		}
	}
	n += max(n/10, 2)
	return n
}

func histogramChart(id, title string, ds []distribution) *Chart {
	var with []distribution
	for _, d := range ds {
		if len(d.counts) > 0 {
			with = append(with, d)
		}
	}
	if len(with) == 0 {
		return nil
	}
	nb := histRange(with, 0.95)
	width := with[0].widthUs
	unit, div := "µs", 1.0
	if width*float64(nb) >= 2000 {
		unit, div = "ms", 1000
	}
	var series []Series
	for _, d := range with {
		var total int64
		for _, c := range d.counts {
			total += c
		}
		if total == 0 {
			continue
		}
		s := Series{Name: d.name}
		for i := 0; i < min(nb, len(d.counts)); i++ {
			share := 100 * float64(d.counts[i]) / float64(total)
			s.X = append(s.X, float64(i)*d.widthUs/div)
			s.Y = append(s.Y, share)
		}
		// Close the last step at its right edge.
		last := min(nb, len(d.counts))
		s.X = append(s.X, float64(last)*d.widthUs/div)
		s.Y = append(s.Y, s.Y[len(s.Y)-1])
		series = append(series, s)
	}
	c := LineChart(LineSpec{ID: id, Title: title, XName: "Latency", XUnit: unit, YName: "Share of samples", YUnit: "%",
		Series: series, Step: true, Area: true, YCap: 100})
	c.Subtitle = fmt.Sprintf("bins of %s; up to the 95th percentile (the CDF shows the tail)", Format(width, "µs"))
	return c
}

func cdfChart(id, title string, ds []distribution) *Chart {
	var series []Series
	fromHist := true
	maxUs := 0.0
	for _, d := range ds {
		if len(d.counts) == 0 {
			fromHist = false
		}
		if d.summary != nil {
			maxUs = math.Max(maxUs, d.summary.P999*1000)
		}
	}
	nb := 0
	if fromHist {
		nb = histRange(ds, 0.999)
		maxUs = math.Max(maxUs, float64(nb)*ds[0].widthUs)
	}
	unit, div := "µs", 1.0
	if maxUs >= 2000 {
		unit, div = "ms", 1000
	}
	for _, d := range ds {
		s := Series{Name: d.name}
		if fromHist {
			var total int64
			for _, c := range d.counts {
				total += c
			}
			var cum int64
			s.X, s.Y = append(s.X, 0), append(s.Y, 0)
			for i := 0; i < min(nb, len(d.counts)); i++ {
				cum += d.counts[i]
				s.X = append(s.X, float64(i+1)*d.widthUs/div)
				s.Y = append(s.Y, 100*float64(cum)/float64(max(total, 1)))
			}
		} else if sm := d.summary; sm != nil {
			pts := [][2]float64{{sm.Min, 0}, {sm.P50, 50}, {sm.P90, 90}, {sm.P99, 99}, {sm.P999, 99.9}}
			sort.SliceStable(pts, func(i, j int) bool { return pts[i][0] < pts[j][0] })
			for _, p := range pts {
				s.X = append(s.X, p[0]*1000/div)
				s.Y = append(s.Y, p[1])
			}
		}
		series = append(series, s)
	}
	c := LineChart(LineSpec{ID: id, Title: title, XName: "Latency", XUnit: unit, YName: "Samples at or below", YUnit: "%",
		Series: series, YMax: 100, Markers: !fromHist})
	if fromHist {
		c.Subtitle = "cumulative share of samples, from the histogram"
	} else {
		c.Subtitle = "from the percentiles min, p50, p90, p99, p99.9 (no histogram kept)"
	}
	return c
}

// ShapingChart draws a shaped flow's throughput over time with its limit
// as a dashed line, and says how far the first interval overshot.
func ShapingChart(id string, s Shaping) *Chart {
	se := intervalSteps("measured at the receiver", s.Series)
	c := LineChart(LineSpec{ID: id, Title: "Shaping: " + s.Name, XName: "Time", XUnit: "s", YName: "Throughput", YUnit: "bit/s",
		Series: []Series{se}, Refs: []RefLine{{Y: s.LimitBps, Label: "limit " + Format(s.LimitBps, "bit/s")}}})
	if over, steady, ok := s.Conformance(); ok {
		c.Subtitle = fmt.Sprintf("first interval at %.2f× the limit; after 1 s the mean is %.0f %% of it", 1+over/100, steady)
	}
	return c
}
