package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// ErrNotComparable is returned when runs cannot be compared (different
// suites, fewer than two runs).
var ErrNotComparable = errors.New("runs not comparable")

// Verdict is how a figure of a run compares with the reference run's.
type Verdict string

// Verdicts.
const (
	Regression   Verdict = "worse"
	Improvement  Verdict = "better"
	WithinSpread Verdict = "within spread"
	Changed      Verdict = "changed" // a metric with no better direction moved beyond its spread
	Missing      Verdict = "missing" // not measured in one of the runs
)

// Stat is one row's figure: the median of its repetitions and their range.
type Stat struct {
	Median, Min, Max float64
	Reps             int
}

// CompareCell is one run's figure beside the reference.
type CompareCell struct {
	Stat     Stat
	DeltaPct float64 // change of the median against the reference, in percent (NaN when undefined)
	Verdict  Verdict
}

// MarshalJSON writes an undefined change as null (JSON has no NaN).
func (c CompareCell) MarshalJSON() ([]byte, error) {
	var d *float64
	if !math.IsNaN(c.DeltaPct) && !math.IsInf(c.DeltaPct, 0) {
		d = &c.DeltaPct
	}
	return json.Marshal(struct {
		Stat     Stat     `json:"stat"`
		DeltaPct *float64 `json:"delta_pct"`
		Verdict  Verdict  `json:"verdict"`
	}{c.Stat, d, c.Verdict})
}

// CompareLine is one metric of one connection across the runs.
type CompareLine struct {
	Connection string
	Backend    string // empty when runs of different backends are compared by connection
	Metric     string
	Ref        Stat
	HasRef     bool
	Others     []CompareCell
}

// Comparison is the result of Compare.
type Comparison struct {
	Suite     string
	Runs      []string // run labels; the first is the reference
	RunIDs    []string
	Lines     []CompareLine
	Tolerance float64 // relative change below which nothing is flagged
	// Worse counts the lines flagged as regressions.
	Worse, Better int
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// Tolerance is the relative change of the median (0.05 = 5 %) a figure
	// must also exceed to be flagged; it keeps single-repetition runs, whose
	// spread is a point, from flagging noise. Zero means 5 %.
	Tolerance float64
}

// minAbsChange is the smallest absolute change worth flagging per unit:
// below it a relative change is noise (0 % loss vs 0.001 %).
var minAbsChange = map[string]float64{"%": 0.05, "ms": 0.002}

// Compare compares runs of one suite against the first. A figure is worse
// only when its whole min–max range over the repetitions lies on the worse
// side of the reference's range, and its median moved by more than the
// tolerance: a difference inside the run-to-run spread is not a regression.
// Rows are matched by backend and connection; when the runs measured
// different single backends (host-gw vs vxlan) they are matched by
// connection.
func Compare(runs []*Report, opt CompareOptions) (*Comparison, error) {
	if len(runs) < 2 {
		return nil, fmt.Errorf("%w: need at least two runs, got %d", ErrNotComparable, len(runs))
	}
	for _, r := range runs[1:] {
		if r.Suite != runs[0].Suite {
			return nil, fmt.Errorf("%w: runs of different suites: run %s is suite %q but run %s is suite %q; compare runs of one suite",
				ErrNotComparable, runs[0].RunID, runs[0].Suite, r.RunID, r.Suite)
		}
	}
	tol := opt.Tolerance
	if tol <= 0 {
		tol = 0.05
	}
	byConn := !sameBackends(runs)
	key := func(row suite.Row) [2]string {
		if byConn {
			return [2]string{"", row.Connection}
		}
		return [2]string{row.Backend, row.Connection}
	}
	cmp := &Comparison{Suite: runs[0].Suite, Tolerance: tol}
	for _, r := range runs {
		cmp.RunIDs = append(cmp.RunIDs, r.RunID)
		cmp.Runs = append(cmp.Runs, runLabel(r, byConn))
	}
	// Keys and metrics in the reference's order, then any only others have.
	var keys [][2]string
	seen := map[[2]string]bool{}
	index := make([]map[[2]string]suite.Row, len(runs))
	for i, r := range runs {
		index[i] = map[[2]string]suite.Row{}
		for _, row := range r.Rows {
			k := key(row)
			if _, dup := index[i][k]; !dup {
				index[i][k] = row
			}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		names := map[string]bool{}
		for i := range runs {
			for m := range index[i][k].Median {
				names[m] = true
			}
		}
		list := make([]string, 0, len(names))
		for m := range names {
			list = append(list, m)
		}
		sort.Strings(list)
		for _, m := range sortMetrics(list) {
			line := CompareLine{Backend: k[0], Connection: k[1], Metric: m}
			ref, ok := statOf(index[0], k, m)
			line.Ref, line.HasRef = ref, ok
			for i := 1; i < len(runs); i++ {
				st, ok2 := statOf(index[i], k, m)
				cell := CompareCell{Stat: st, DeltaPct: math.NaN(), Verdict: Missing}
				if ok && ok2 {
					cell.DeltaPct = deltaPct(ref.Median, st.Median)
					cell.Verdict = judge(Info(m), ref, st, tol)
					switch cell.Verdict {
					case Regression:
						cmp.Worse++
					case Improvement:
						cmp.Better++
					}
				}
				line.Others = append(line.Others, cell)
			}
			cmp.Lines = append(cmp.Lines, line)
		}
	}
	return cmp, nil
}

func sameBackends(runs []*Report) bool {
	set := func(r *Report) string {
		var bs []string
		seen := map[string]bool{}
		for _, row := range r.Rows {
			if !seen[row.Backend] {
				seen[row.Backend] = true
				bs = append(bs, row.Backend)
			}
		}
		sort.Strings(bs)
		return strings.Join(bs, ",")
	}
	first := set(runs[0])
	for _, r := range runs[1:] {
		if set(r) != first && len(r.Rows) > 0 && len(runs[0].Rows) > 0 {
			return false
		}
	}
	return true
}

func runLabel(r *Report, byConn bool) string {
	if !byConn || len(r.Rows) == 0 || r.Rows[0].Backend == "" {
		return r.RunID
	}
	return r.RunID + " (" + r.Rows[0].Backend + ")"
}

func statOf(idx map[[2]string]suite.Row, k [2]string, m string) (Stat, bool) {
	row, ok := idx[k]
	if !ok {
		return Stat{}, false
	}
	v, ok := row.Median[m]
	if !ok {
		return Stat{}, false
	}
	lo, hi := valueOr(row.Min, m), valueOr(row.Max, m)
	if math.IsNaN(lo) {
		lo = v
	}
	if math.IsNaN(hi) {
		hi = v
	}
	return Stat{Median: v, Min: lo, Max: hi, Reps: row.Repetitions}, true
}

func deltaPct(ref, v float64) float64 {
	if ref == 0 {
		if v == 0 {
			return 0
		}
		return math.NaN()
	}
	return 100 * (v - ref) / math.Abs(ref)
}

// judge applies the rule of Compare to one figure.
func judge(mi MetricInfo, ref, st Stat, tol float64) Verdict {
	diff := st.Median - ref.Median
	if math.Abs(diff) <= minAbsChange[mi.Unit] || math.Abs(diff) <= tol*math.Abs(ref.Median) {
		return WithinSpread
	}
	above := st.Min > ref.Max // the whole range moved up
	below := st.Max < ref.Min // the whole range moved down
	if !above && !below {
		return WithinSpread
	}
	switch mi.Better {
	case Higher:
		if below {
			return Regression
		}
		return Improvement
	case Lower:
		if above {
			return Regression
		}
		return Improvement
	}
	return Changed
}

// KeyTable is Table restricted to the key figures (KeyMetrics), with every
// other line that is worse beyond its spread kept as well.
func (c *Comparison) KeyTable() Table {
	key := map[string]bool{}
	for _, m := range keyMetrics {
		key[m] = true
	}
	keep := &Comparison{Runs: c.Runs}
	for _, l := range c.Lines {
		worse := false
		for _, o := range l.Others {
			worse = worse || o.Verdict == Regression
		}
		if key[l.Metric] || worse {
			keep.Lines = append(keep.Lines, l)
		}
	}
	return keep.Table()
}

// Table lays the comparison out: the reference's figure, then each other
// run's figure, its change and the verdict.
func (c *Comparison) Table() Table {
	t := Table{Header: []string{"Connection", "Metric", c.Runs[0]}}
	for _, r := range c.Runs[1:] {
		t.Header = append(t.Header, r, "change", "verdict")
	}
	prev := ""
	for _, l := range c.Lines {
		conn := l.Connection
		if l.Backend != "" {
			conn = l.Backend + ", " + conn
		}
		mi := Info(l.Metric)
		first := conn != prev
		prev = conn
		cell0 := ""
		if first {
			cell0 = conn
		}
		line := []string{cell0, mi.Label, statText(l.Ref, l.HasRef, mi.Unit)}
		for _, o := range l.Others {
			line = append(line, statText(o.Stat, o.Verdict != Missing, mi.Unit), deltaText(o.DeltaPct, o.Verdict), string(o.Verdict))
		}
		t.Lines = append(t.Lines, line)
		t.First = append(t.First, first)
	}
	return t
}

func statText(s Stat, ok bool, unit string) string {
	if !ok {
		return "–"
	}
	return FormatRange(s.Median, s.Min, s.Max, unit)
}

func deltaText(d float64, v Verdict) string {
	if v == Missing || math.IsNaN(d) {
		return "–"
	}
	return fmt.Sprintf("%+.1f %%", d)
}

// WriteText writes the comparison for a terminal, with a summary line.
func (c *Comparison) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "compare %s runs: %s (reference) vs %s\n", c.Suite, c.Runs[0], strings.Join(c.Runs[1:], ", "))
	fmt.Fprintf(&b, "a figure is worse when all its repetitions fall outside the reference's min–max on the worse side and its median moved more than %.0f %%\n\n", 100*c.Tolerance)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := c.Table().WriteText(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d worse, %d better beyond the run-to-run spread\n", c.Worse, c.Better)
	return err
}

// Charts compares the runs' key figures side by side.
func (c *Comparison) Charts() []*Chart {
	var out []*Chart
	for _, spec := range []struct{ id, title, yname, metric string }{
		{"cmp-throughput", "TCP throughput by connection", "Throughput", "throughput_bps.receiver"},
		{"cmp-rtt", "Request/response round trip p99 by connection", "Round trip", "rtt_ms.p99"},
	} {
		var conns []string
		seen := map[string]bool{}
		for _, l := range c.Lines {
			if l.Metric == spec.metric {
				name := l.Connection
				if l.Backend != "" {
					name = l.Backend + ", " + l.Connection
				}
				if !seen[name] {
					seen[name] = true
					conns = append(conns, name)
				}
			}
		}
		if len(conns) == 0 {
			continue
		}
		bs := BarSpec{ID: spec.id, Title: spec.title, YName: spec.yname, YUnit: Info(spec.metric).Unit, Categories: conns, Groups: c.Runs,
			Subtitle: "median of each run; whiskers: min–max of its repetitions"}
		for i := range c.Runs {
			vs, lo, hi := make([]float64, len(conns)), make([]float64, len(conns)), make([]float64, len(conns))
			for j := range conns {
				vs[j], lo[j], hi[j] = math.NaN(), math.NaN(), math.NaN()
			}
			ci := 0
			for _, l := range c.Lines {
				if l.Metric != spec.metric {
					continue
				}
				var st Stat
				ok := false
				if i == 0 {
					st, ok = l.Ref, l.HasRef
				} else {
					st, ok = l.Others[i-1].Stat, l.Others[i-1].Verdict != Missing
				}
				if ok {
					vs[ci], lo[ci], hi[ci] = st.Median, st.Min, st.Max
				}
				ci++
			}
			bs.Values, bs.Lo, bs.Hi = append(bs.Values, vs), append(bs.Lo, lo), append(bs.Hi, hi)
		}
		out = append(out, BarChart(bs))
	}
	return out
}
