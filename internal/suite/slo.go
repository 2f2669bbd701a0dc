package suite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
)

// SLOAPIVersion is the apiVersion an SLO file must carry.
const SLOAPIVersion = "cnperf/v1"

// SLOFile is a file of objectives:
//
//	{"apiVersion": "cnperf/v1",
//	 "objectives": [
//	   {"expr": "loss_pct < 2"},
//	   {"connection": "pod-pod cross node", "expr": "rtt_ms.p99 < 1"},
//	   {"expr": "throughput_bps.receiver > 500M"}]}
//
// An objective without a connection applies to every row that has the
// metric.
type SLOFile struct {
	APIVersion string      `json:"apiVersion"`
	Objectives []Objective `json:"objectives"`
}

// Objective is one parsed objective.
type Objective struct {
	Connection string `json:"connection,omitempty"`
	Expr       string `json:"expr"`

	Metric    string  `json:"-"`
	Op        string  `json:"-"`
	Threshold float64 `json:"-"`
}

// ParseSLOs reads an SLO file strictly: unknown fields, an unknown metric,
// operator or connection, or a bad number are errors naming the culprit.
func ParseSLOs(data []byte, reg *Registry) ([]Objective, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f SLOFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("slo file: %w", err)
	}
	if f.APIVersion != SLOAPIVersion {
		return nil, fmt.Errorf("slo file: apiVersion %q, want %q", f.APIVersion, SLOAPIVersion)
	}
	if len(f.Objectives) == 0 {
		return nil, errors.New("slo file: no objectives")
	}
	known := KnownMetrics(reg)
	var errs []error
	for i := range f.Objectives {
		o := &f.Objectives[i]
		if err := o.parse(known); err != nil {
			errs = append(errs, fmt.Errorf("objective %d: %w", i+1, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("slo file: %w", err)
	}
	return f.Objectives, nil
}

var sloOps = []string{"<=", ">=", "==", "<", ">"}

func (o *Objective) parse(known map[string]bool) error {
	if o.Connection != "" {
		ok := false
		for _, c := range ConnectionOrder {
			ok = ok || c == o.Connection
		}
		if !ok {
			return fmt.Errorf("unknown connection %q (want one of %s)", o.Connection, strings.Join(ConnectionOrder, ", "))
		}
	}
	fields := strings.Fields(o.Expr)
	if len(fields) != 3 {
		return fmt.Errorf("expr %q: want METRIC OP VALUE, e.g. \"loss_pct < 2\"", o.Expr)
	}
	o.Metric, o.Op = fields[0], fields[1]
	if !known[o.Metric] {
		return fmt.Errorf("unknown metric %q", o.Metric)
	}
	opOK := false
	for _, op := range sloOps {
		opOK = opOK || op == o.Op
	}
	if !opOK {
		return fmt.Errorf("unknown operator %q in %q (want <, <=, >, >= or ==)", o.Op, o.Expr)
	}
	v, err := parseQuantity(fields[2])
	if err != nil {
		return fmt.Errorf("value %q in %q: %w", fields[2], o.Expr, err)
	}
	o.Threshold = v
	return nil
}

// parseQuantity reads a number with an optional k, M, G suffix (powers of
// 1000, as rates are written).
func parseQuantity(s string) (float64, error) {
	if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		return v, nil
	}
	r, err := probe.ParseRate(s)
	if err != nil {
		return 0, errors.New("not a number (suffixes k, M, G allowed)")
	}
	return float64(r), nil
}

// Check is an objective evaluated on one row.
type Check struct {
	Objective  Objective `json:"objective"`
	Connection string    `json:"connection"`
	Backend    string    `json:"backend,omitempty"`
	Value      float64   `json:"value"`
	Pass       bool      `json:"pass"`
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

// Evaluate checks every objective against every row it applies to (the
// rows' medians). An objective that applies to no row that has its metric
// fails with a missing value, so a typo in a connection cannot pass
// silently.
func Evaluate(objs []Objective, rows []Row) []Check {
	var out []Check
	for _, o := range objs {
		matched := false
		for _, r := range rows {
			if o.Connection != "" && o.Connection != r.Connection {
				continue
			}
			v, ok := r.Median[o.Metric]
			if !ok {
				continue
			}
			matched = true
			out = append(out, Check{Objective: o, Connection: r.Connection, Backend: r.Backend, Value: v, Pass: compare(v, o.Op, o.Threshold)})
		}
		if !matched {
			out = append(out, Check{Objective: o, Connection: o.Connection, Value: math.NaN(), Pass: false})
		}
	}
	return out
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

// AllPass reports whether every check passed.
func AllPass(cs []Check) bool {
	for _, c := range cs {
		if !c.Pass {
			return false
		}
	}
	return true
}

// A MetricLister is a suite whose rows carry figures of their own beyond
// the probes' and the connection rows' (SLO files may name them).
type MetricLister interface {
	RowMetrics() []string
}

// KnownMetrics lists every metric name an objective may use: the figures of
// probe results, of connection rows and of the rows of reg's suites (reg
// may be nil).
func KnownMetrics(reg *Registry) map[string]bool {
	known := map[string]bool{}
	for name := range probe.Metrics(fullResult()) {
		known[name] = true
	}
	for _, pairs := range rowMetrics {
		for _, p := range pairs {
			known[p[1]] = true
		}
	}
	if reg != nil {
		for _, n := range reg.Names() {
			s, _ := reg.Get(n)
			if ml, ok := s.(MetricLister); ok {
				for _, name := range ml.RowMetrics() {
					known[name] = true
				}
			}
		}
	}
	return known
}

// KnownMetricNames returns KnownMetrics sorted, for help texts.
func KnownMetricNames(reg *Registry) []string {
	var names []string
	for n := range KnownMetrics(reg) {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fullResult has every optional figure set, so flattening it names them all.
func fullResult() *probe.Result {
	s := &probe.Summary{}
	sr := &probe.SenderReceiver{}
	return &probe.Result{
		DSCPReceived: probe.Int(0), DSCPSurvived: probe.Bool(true),
		ThroughputBps: sr, Bytes: sr, Retransmits: probe.Int64(0), SRTTms: probe.Float(0), CPUPct: sr,
		Packets: &probe.PacketCounts{}, LossPct: probe.Float(0), JitterMs: probe.Float(0), PPS: probe.Float(0),
		LatencyMs: s, Clock: &probe.ClockInfo{}, RTTms: s, AppRTTms: s, TransactionsPerS: probe.Float(0),
	}
}
