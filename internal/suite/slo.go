package suite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
//	   {"select": {"marking": "EF"}, "stat": "max", "expr": "latency_ms.p99 <= 1"},
//	   {"select": {"marking": "EF"}, "vs": {"marking": "none"}, "expr": "latency_ms.p99 <= 0.1 x"},
//	   {"connection": "pod-pod cross node", "vs": {"connection": "node-node"},
//	    "expr": "throughput_bps.receiver >= 0.8 x"},
//	   {"expr": "success >= 99.9 % over 1h"}]}
//
// An objective applies to every row that has its metric and matches its
// connection and select (labels: connection, backend, src, dst and the
// suite's own, such as variant, marking, placement, flow). stat is the
// statistic over repetitions: median (the default), min, max or p95. An
// expression "METRIC OP FACTOR x" is relative: it compares each row with
// its reference row, the row that matches vs and agrees with the row on
// its cell (connection, backend, placement, variant, flow and the select
// keys, except those vs names). "success OP PCT % over WINDOW" is an
// availability objective: the ping mesh's answered echo requests over the
// window, from the server's stored rounds (EvaluateAvailability). See
// docs/slo.md.
type SLOFile struct {
	APIVersion string      `json:"apiVersion"`
	Objectives []Objective `json:"objectives"`
	// Strict makes every objective strict (Objective.Strict).
	Strict bool `json:"strict,omitempty"`
}

// Objective is one parsed objective.
type Objective struct {
	Connection string            `json:"connection,omitempty"`
	Select     map[string]string `json:"select,omitempty"`
	Stat       string            `json:"stat,omitempty"`
	Expr       string            `json:"expr"`
	Versus     map[string]string `json:"vs,omitempty"`
	// Strict fails the objective when it selects no row (or finds no
	// reference row); otherwise that is reported as "no rows" and fails
	// nothing, so one file of traffic classes fits runs that carry only
	// some of them.
	Strict bool `json:"strict,omitempty"`

	Metric    string  `json:"-"`
	Op        string  `json:"-"`
	Threshold float64 `json:"-"`
	// Relative: Threshold is a factor of the reference row's value.
	Relative bool `json:"-"`
	// Availability: "success OP PCT % over WINDOW", evaluated on the ping
	// mesh's stored rounds over Window (EvaluateAvailability), not on rows.
	Availability bool          `json:"-"`
	Window       time.Duration `json:"-"`
}

// SLO statistics over a row's repetitions.
const (
	StatMedian = "median"
	StatMin    = "min"
	StatMax    = "max"
	StatP95    = "p95"
)

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
		o.Strict = o.Strict || f.Strict
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
	if o.Connection != "" && !slices.Contains(ConnectionOrder, o.Connection) {
		return fmt.Errorf("unknown connection %q (want one of %s)", o.Connection, strings.Join(ConnectionOrder, ", "))
	}
	switch o.Stat {
	case "", StatMedian, StatMin, StatMax, StatP95:
	default:
		return fmt.Errorf("unknown stat %q (want median, min, max or p95)", o.Stat)
	}
	for what, m := range map[string]map[string]string{"select": o.Select, "vs": o.Versus} {
		for k, v := range m {
			if k == "" || v == "" {
				return fmt.Errorf("%s: empty label or value (%q: %q)", what, k, v)
			}
		}
	}
	fields := strings.Fields(o.Expr)
	if len(fields) > 2 && fields[0] == MetricSuccess {
		return o.parseAvailability(fields)
	}
	switch {
	case len(fields) == 4 && fields[3] == "x":
		o.Relative = true
	case len(fields) != 3:
		return fmt.Errorf("expr %q: want METRIC OP VALUE (\"loss_pct < 2\") or, with vs, METRIC OP FACTOR x (\"latency_ms.p99 <= 0.1 x\")", o.Expr)
	}
	if o.Relative != (len(o.Versus) > 0) {
		if o.Relative {
			return fmt.Errorf("expr %q is relative (FACTOR x): give vs, the labels of the reference rows (e.g. {\"marking\": \"none\"})", o.Expr)
		}
		return fmt.Errorf("vs is given but expr %q is absolute: write it as METRIC OP FACTOR x", o.Expr)
	}
	o.Metric, o.Op = fields[0], fields[1]
	if !known[o.Metric] {
		return fmt.Errorf("unknown metric %q", o.Metric)
	}
	if !validOp(o.Op) {
		return fmt.Errorf("unknown operator %q in %q (want <, <=, >, >= or ==)", o.Op, o.Expr)
	}
	v, err := parseQuantity(fields[2])
	if err != nil {
		return fmt.Errorf("value %q in %q: %w", fields[2], o.Expr, err)
	}
	o.Threshold = v
	return nil
}

func validOp(op string) bool { return slices.Contains(sloOps, op) }

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
	for _, f := range figures {
		known[f.Name] = true
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
