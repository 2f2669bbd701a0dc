package suite

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Check is an objective evaluated on one row.
type Check struct {
	Objective  Objective `json:"objective"`
	Connection string    `json:"connection"`
	Backend    string    `json:"backend,omitempty"`
	// Labels are the row's own labels (variant, marking, ...), so two
	// checks of one connection can be told apart.
	Labels map[string]string `json:"labels,omitempty"`
	// Value is the row's statistic of the metric (NaN: no row had it).
	Value float64 `json:"value"`
	// Reference and Ratio are set for a relative objective: the reference
	// row's statistic and Value / Reference.
	Reference *float64 `json:"reference,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"`
	Pass      bool     `json:"pass"`
	// NoRows says the objective selected no row with its metric, or a
	// relative one found no reference row: nothing was checked. It fails
	// only a strict objective (Failed).
	NoRows bool `json:"no_rows,omitempty"`
	// Detail says why a check failed without a value, or what a relative
	// one compared.
	Detail string `json:"detail,omitempty"`
	// Availability is what an availability objective was evaluated on.
	Availability *MeshAvailability `json:"availability,omitempty"`
}

// MarshalJSON writes a missing value (NaN: no row had the metric) as null,
// which JSON can hold and NaN cannot.
func (c Check) MarshalJSON() ([]byte, error) {
	type plain Check
	v := &c.Value
	if math.IsNaN(c.Value) {
		v = nil
	}
	return json.Marshal(struct {
		plain
		Value *float64 `json:"value"`
	}{plain(c), v})
}

// Line is the check as the reports print it:
// "FAIL  latency_ms.p99 <= 0.1 x (pod-pod cross node, marking=EF): 0.52 against 1.08 (marking=none): ratio 0.481".
func (c Check) Line() string {
	verdict := "PASS"
	switch {
	case c.NoRows && !c.Objective.Strict:
		verdict = "NO ROWS"
	case !c.Pass:
		verdict = "FAIL"
	}
	var where []string
	if c.Connection != "" {
		where = append(where, c.Connection)
		if c.Backend != "" {
			where[0] += " on " + c.Backend
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		if k != "verdict" {
			where = append(where, k+"="+c.Labels[k])
		}
	}
	val := "missing"
	if !math.IsNaN(c.Value) {
		val = strconv.FormatFloat(c.Value, 'g', 6, 64)
	}
	expr := c.Objective.Expr
	if s := c.Objective.Stat; s != "" && s != StatMedian {
		expr = s + " of " + expr
	}
	if c.Objective.Availability {
		where = append([]string{"ping mesh"}, where...)
	}
	if len(where) == 0 {
		where = []string{"every row"}
	}
	line := fmt.Sprintf("%s  %s (%s): %s", verdict, expr, strings.Join(where, ", "), val)
	if c.Detail != "" {
		line += " " + c.Detail
	}
	return line
}

// Evaluate checks every objective against every row it applies to. An
// objective that applies to no row that has its metric gives one check
// with a missing value and NoRows: printed as "NO ROWS", so a typo in a
// connection or a label shows, and failed only when the objective is
// strict (Failed).
func Evaluate(objs []Objective, rows []Row) []Check {
	var out []Check
	for _, o := range objs {
		if o.Availability {
			continue // the mesh's, not the rows' (EvaluateAvailability)
		}
		matched := false
		for _, r := range rows {
			if !o.selects(r) {
				continue
			}
			if _, ok := r.Median[o.Metric]; !ok {
				continue
			}
			matched = true
			out = append(out, o.check(r, rows))
		}
		if !matched {
			out = append(out, Check{Objective: o, Connection: o.Connection, Labels: o.Select, Value: math.NaN(), NoRows: true, Detail: "(no row matches)"})
		}
	}
	return out
}

// check evaluates o on the row r (which o selects and which has the
// metric); rows are all rows, for a relative objective's reference.
func (o Objective) check(r Row, rows []Row) Check {
	c := Check{Objective: o, Connection: r.Connection, Backend: r.Backend, Labels: r.Labels}
	v, err := o.statistic(r)
	c.Value = v
	if err != nil {
		c.Value, c.Detail = math.NaN(), "("+err.Error()+")"
		return c
	}
	if !o.Relative {
		c.Pass = compare(v, o.Op, o.Threshold)
		return c
	}
	ref, ok := o.reference(r, rows)
	if !ok {
		c.NoRows, c.Detail = true, fmt.Sprintf("(no reference row with %s for this row)", labelList(o.Versus))
		return c
	}
	rv, err := o.statistic(ref)
	if err != nil || rv == 0 {
		c.Detail = fmt.Sprintf("(reference %s has no usable %s)", labelList(o.Versus), o.Metric)
		return c
	}
	ratio := v / rv
	c.Reference, c.Ratio = &rv, &ratio
	c.Pass = compare(ratio, o.Op, o.Threshold)
	c.Detail = fmt.Sprintf("against %s (%s): ratio %s, want %s %s", strconv.FormatFloat(rv, 'g', 6, 64), labelList(o.Versus),
		strconv.FormatFloat(ratio, 'g', 3, 64), o.Op, strconv.FormatFloat(o.Threshold, 'g', -1, 64))
	return c
}

// rowLabel is a row's value for a selection key: connection, backend,
// src, dst, or one of the suite's labels.
func rowLabel(r Row, k string) (string, bool) {
	switch k {
	case "connection":
		return r.Connection, true
	case "backend":
		return r.Backend, true
	case "src":
		return r.Src, true
	case "dst":
		return r.Dst, true
	}
	v, ok := r.Labels[k]
	return v, ok
}

// matches reports whether r has every label of sel.
func matches(r Row, sel map[string]string) bool {
	for k, want := range sel {
		if v, ok := rowLabel(r, k); !ok || v != want {
			return false
		}
	}
	return true
}

// selects reports whether o applies to r.
func (o Objective) selects(r Row) bool {
	return (o.Connection == "" || o.Connection == r.Connection) && matches(r, o.Select)
}

// cellKeys are the labels on which a row and its reference row must
// agree (besides the select keys), unless vs names them.
var cellKeys = []string{"connection", "backend", "placement", "variant", "flow"}

// reference finds r's reference row: it matches o.Versus and agrees with
// r on the cell keys and the select keys vs does not name.
func (o Objective) reference(r Row, rows []Row) (Row, bool) {
	want := maps.Clone(o.Versus)
	keys := append(slices.Clone(cellKeys), slices.Collect(maps.Keys(o.Select))...)
	for _, k := range keys {
		if _, named := o.Versus[k]; named {
			continue
		}
		if v, ok := rowLabel(r, k); ok {
			want[k] = v
		}
	}
	for _, x := range rows {
		if matches(x, want) {
			if _, ok := x.Median[o.Metric]; ok {
				return x, true
			}
		}
	}
	return Row{}, false
}

// statistic is o's statistic of its metric on r.
func (o Objective) statistic(r Row) (float64, error) {
	switch o.Stat {
	case StatMin:
		return r.Min[o.Metric], nil
	case StatMax:
		return r.Max[o.Metric], nil
	case StatP95:
		vs := r.values[o.Metric]
		if len(vs) == 0 {
			return math.NaN(), fmt.Errorf("p95 needs the repetitions' values; these rows keep only median, min and max")
		}
		return Percentile(vs, 95), nil
	}
	return r.Median[o.Metric], nil
}

// Percentile is the p-th percentile of vs (nearest rank on the sorted
// values; NaN for none).
func Percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// labelList writes labels as "k=v, k2=v2", sorted.
func labelList(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

func compare(v float64, op string, t float64) bool {
	switch op {
	case "<":
		return v < t
	case "<=":
		return v <= t
	case ">":
		return v > t
	case ">=":
		return v >= t
	case "==":
		return v == t
	}
	return false
}

// Failed says whether the check fails its run: it did not pass, and it
// checked something or its objective is strict.
func (c Check) Failed() bool {
	return !c.Pass && (!c.NoRows || c.Objective.Strict)
}

// AllPass reports whether no check failed (Failed).
func AllPass(cs []Check) bool {
	for _, c := range cs {
		if c.Failed() {
			return false
		}
	}
	return true
}
