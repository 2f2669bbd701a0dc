package suite

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Outcome is one step with what it measured, or why it could not.
type Outcome struct {
	Step   Step          `json:"step"`
	Result *probe.Result `json:"result,omitempty"`
	Err    string        `json:"error,omitempty"`
	// Made are the changes of the step's phase made while its steps ran
	// (Change.After), in the order asked (RunParams.Made).
	Made []ChangeMade `json:"made,omitempty"`
}

// ChangeMade is a change made while a phase's steps ran: when the Runner
// asked the environment for it and when the environment returned, by the
// Runner's clock (a suite that sets them beside an agent's timestamps
// needs the clocks to agree); and when the Runner asked to undo it after
// the steps ended and when the undo returned (an environment's undo of a
// policy set returns once its pair connects again: Env).
type ChangeMade struct {
	Change  Change    `json:"change"`
	Asked   time.Time `json:"asked"`
	Made    time.Time `json:"made"`
	Undone  time.Time `json:"undone,omitzero"`
	Removed time.Time `json:"removed,omitzero"`
}

// Figure is one figure a measurement puts in a row: the probe result's
// name for it, the row's name (prefixed where two measurements share one:
// UDP's throughput beside TCP's, ping's RTT beside rr's), and how people
// read it. Labels and units come from here, by the measurement's kind,
// never from the raw names.
type Figure struct {
	Measure string // tcp, udp, rr, ping, stamp
	Probe   string // the probe result's dotted name: "loss_pct"
	Name    string // the row's name: "ping.loss_pct"
	Label   string // "Ping loss"
	Unit    string // "bit/s", "B", "%", "ms", "tx/s", "pkt/s", or "" for counts
}

// figures are the figures of each measurement in a row, in the order
// tables show them (the ones the source studies tabulated first).
var figures = []Figure{
	{MeasureTCP, "throughput_bps.sender", "throughput_bps.sender", "TCP throughput, sender", "bit/s"},
	{MeasureTCP, "throughput_bps.receiver", "throughput_bps.receiver", "TCP throughput, receiver", "bit/s"},
	{MeasureTCP, "bytes.sender", "bytes.sender", "TCP transfer, sender", "B"},
	{MeasureTCP, "bytes.receiver", "bytes.receiver", "TCP transfer, receiver", "B"},
	{MeasureTCP, "cpu_pct.sender", "cpu_pct.sender", "CPU, sender", "%"},
	{MeasureTCP, "cpu_pct.receiver", "cpu_pct.receiver", "CPU, receiver", "%"},
	{MeasureTCP, "retransmits", "retransmits", "TCP retransmits", ""},
	{MeasureTCP, "srtt_ms", "srtt_ms", "TCP smoothed RTT", "ms"},
	{MeasureUDP, "throughput_bps.sender", "udp.throughput_bps.sender", "UDP throughput, sender", "bit/s"},
	{MeasureUDP, "throughput_bps.receiver", "udp.throughput_bps.receiver", "UDP throughput, receiver", "bit/s"},
	{MeasureUDP, "loss_pct", "loss_pct", "UDP loss", "%"},
	{MeasureUDP, "jitter_ms", "jitter_ms", "UDP jitter", "ms"},
	{MeasureUDP, "pps", "pps", "UDP packets/s", "pkt/s"},
	{MeasureUDP, "latency_ms.p50", "latency_ms.p50", "UDP one-way delay p50", "ms"},
	{MeasureUDP, "latency_ms.p99", "latency_ms.p99", "UDP one-way delay p99", "ms"},
	{MeasureRR, "rtt_ms.min", "rtt_ms.min", "RR round trip min", "ms"},
	{MeasureRR, "rtt_ms.avg", "rtt_ms.avg", "RR round trip avg", "ms"},
	{MeasureRR, "rtt_ms.p50", "rtt_ms.p50", "RR round trip p50", "ms"},
	{MeasureRR, "rtt_ms.p90", "rtt_ms.p90", "RR round trip p90", "ms"},
	{MeasureRR, "rtt_ms.p99", "rtt_ms.p99", "RR round trip p99", "ms"},
	{MeasureRR, "rtt_ms.max", "rtt_ms.max", "RR round trip max", "ms"},
	{MeasureRR, "app_rtt_ms.avg", "app_rtt_ms.avg", "RR application RTT avg", "ms"},
	{MeasureRR, "app_rtt_ms.p99", "app_rtt_ms.p99", "RR application RTT p99", "ms"},
	{MeasureRR, "transactions_per_s", "transactions_per_s", "RR transactions/s", "tx/s"},
	{MeasurePing, "rtt_ms.avg", "ping.rtt_ms.avg", "Ping RTT avg", "ms"},
	{MeasurePing, "rtt_ms.p99", "ping.rtt_ms.p99", "Ping RTT p99", "ms"},
	{MeasurePing, "loss_pct", "ping.loss_pct", "Ping loss", "%"},
	{MeasureStamp, "rtt_ms.p50", "stamp.rtt_ms.p50", "STAMP round trip p50", "ms"},
	{MeasureStamp, "rtt_ms.p99", "stamp.rtt_ms.p99", "STAMP round trip p99", "ms"},
	{MeasureStamp, "forward.delay_ms.p50", "stamp.forward.delay_ms.p50", "STAMP forward one-way delay p50", "ms"},
	{MeasureStamp, "reverse.delay_ms.p50", "stamp.reverse.delay_ms.p50", "STAMP reverse one-way delay p50", "ms"},
	{MeasureStamp, "forward.error_bound_ms", "stamp.forward.error_bound_ms", "STAMP one-way delay error bound", "ms"},
	{MeasureStamp, "forward.loss_pct", "stamp.forward.loss_pct", "STAMP forward loss", "%"},
	{MeasureStamp, "reverse.loss_pct", "stamp.reverse.loss_pct", "STAMP reverse loss", "%"},
	{MeasureStamp, "forward.dscp_received", "stamp.forward.dscp_received", "STAMP DSCP at reflector", ""},
	{MeasureStamp, "reverse.dscp_received", "stamp.reverse.dscp_received", "STAMP DSCP of reply", ""},
}

// Figures returns every figure measurements put in rows, in table order.
func Figures() []Figure { return append([]Figure(nil), figures...) }

// FigureOf returns the figure a row names name, and false for a name no
// measurement puts in rows (a suite's own figures).
func FigureOf(name string) (Figure, bool) {
	for _, f := range figures {
		if f.Name == name {
			return f, true
		}
	}
	return Figure{}, false
}

// RowFigures returns the figures of one measurement's result under their
// row names; a measurement with no figures here (trace, wire) gives none.
func RowFigures(measure string, r *probe.Result) map[string]float64 {
	out := map[string]float64{}
	m := probe.Metrics(r)
	for _, f := range figures {
		if f.Measure != measure {
			continue
		}
		if v, ok := m[f.Probe]; ok && !math.IsNaN(v) {
			out[f.Name] = v
		}
	}
	return out
}

// Row is one connection's figures: each the median of its repetitions,
// with the spread in Min and Max.
type Row struct {
	Connection  string
	Backend     string
	Src, Dst    string
	Repetitions int
	Median      map[string]float64
	Min, Max    map[string]float64
	Errors      []string
	// OverheadPct is how much lower the TCP receiver throughput is than
	// node-node's of the same backend (see Overhead; set by SetOverhead).
	OverheadPct *float64
	// ServiceOverhead is, on the pod-service row, what the Service adds
	// to the same pods' path without it (pod-pod cross node); see
	// SetOverhead.
	ServiceOverhead *ServiceOverhead
	// Labels are a suite's own keys of the row (qos-priority's variant,
	// marking and verdict), written as top-level JSON strings.
	Labels map[string]string
	// Series are a suite's per-interval figures (shaping's receiver rate
	// per 100 ms), written as top-level JSON arrays.
	Series map[string][]float64
	// Texts are figures whose value is a word (qos-priority's
	// wire_dscp.encap: "vxlan" or "none"), written nested by their dotted
	// names beside the numbers; unlike Labels they do not name the row.
	Texts map[string]string

	// values are each figure's per-repetition values, in repetition order,
	// for statistics other than median, min and max (an SLO's "p95"); nil
	// for rows not aggregated by Rows or LabelRows.
	values map[string][]float64
}

// failure says why o has no figures, as "MEASURE #REPEAT: ERROR"
// ("no result" when the step gave none without an error), or "" when it
// has them.
func (o Outcome) failure() string {
	if o.Err == "" && o.Result != nil {
		return ""
	}
	msg := o.Err
	if msg == "" {
		msg = "no result"
	}
	return fmt.Sprintf("%s #%d: %s", o.Step.Measure, o.Step.Repeat+1, msg)
}

// Rows groups outcomes by backend and connection and aggregates them.
// Rows come in backend order of first appearance, then ConnectionOrder,
// then other connections (a suite's own labels) in order of appearance.
func Rows(outcomes []Outcome) []Row {
	type key struct{ backend, conn string }
	values := map[key]map[string][]float64{}
	rows := map[key]*Row{}
	reps := map[key]map[int]bool{}
	var backends []string
	seenBackend := map[string]bool{}
	order := append([]string(nil), ConnectionOrder...)
	for _, o := range outcomes {
		k := key{o.Step.Backend, o.Step.Connection}
		r, ok := rows[k]
		if !ok {
			r = &Row{Connection: k.conn, Backend: k.backend, Src: EndpointLabel(o.Step.Src), Dst: EndpointLabel(o.Step.Dst)}
			if o.Step.Via != "" {
				r.Dst = o.Step.Via + " -> " + r.Dst
			}
			rows[k], values[k], reps[k] = r, map[string][]float64{}, map[int]bool{}
			if !slices.Contains(order, k.conn) {
				order = append(order, k.conn)
			}
			if !seenBackend[k.backend] {
				seenBackend[k.backend] = true
				backends = append(backends, k.backend)
			}
		}
		if failure := o.failure(); failure != "" {
			r.Errors = append(r.Errors, failure)
			continue
		}
		reps[k][o.Step.Repeat] = true
		for name, v := range RowFigures(o.Step.Measure, o.Result) {
			values[k][name] = append(values[k][name], v)
		}
	}
	var out []Row
	for _, b := range backends {
		for _, c := range order {
			k := key{b, c}
			r, ok := rows[k]
			if !ok {
				continue
			}
			r.Repetitions = len(reps[k])
			r.Median, r.Min, r.Max = map[string]float64{}, map[string]float64{}, map[string]float64{}
			r.values = values[k]
			for name, vs := range values[k] {
				r.Median[name], r.Min[name], r.Max[name] = Median(vs), MinOf(vs), MaxOf(vs)
			}
			out = append(out, *r)
		}
	}
	return out
}

// Overhead returns how much lower the row's TCP receiver throughput is than
// the node-node row's of the same backend, in percent (the source study's
// "16 %"), and false when either figure is missing.
func Overhead(rows []Row, r Row) (float64, bool) {
	if r.Connection == NodeNode {
		return 0, false
	}
	for _, n := range rows {
		if n.Connection == NodeNode && n.Backend == r.Backend {
			base, ok1 := n.Median["throughput_bps.receiver"]
			v, ok2 := r.Median["throughput_bps.receiver"]
			if !ok1 || !ok2 || base <= 0 {
				return 0, false
			}
			return 100 * (base - v) / base, true
		}
	}
	return 0, false
}

// EndpointLabel names an endpoint in rows: "pod@node", or the node of a
// host-network agent.
func EndpointLabel(e Endpoint) string {
	if e.Node == "" {
		return e.Name
	}
	if e.HostNetwork {
		return e.Node
	}
	return e.Name + "@" + e.Node
}

// Median returns the median of vs (the mean of the middle two for an even
// count).
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MinOf returns the smallest of vs (not empty).
func MinOf(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs[1:] {
		m = math.Min(m, v)
	}
	return m
}

// MaxOf returns the largest of vs (not empty).
func MaxOf(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs[1:] {
		m = math.Max(m, v)
	}
	return m
}

// MarshalJSON writes the row with its figures nested by their dotted names
// ("throughput_bps": {"sender": ...}), as probe results are, and the spread
// under "min" and "max".
func (r Row) MarshalJSON() ([]byte, error) {
	obj := nest(r.Median)
	obj["connection"] = r.Connection
	obj["backend"] = r.Backend
	obj["src"] = r.Src
	obj["dst"] = r.Dst
	obj["repetitions"] = r.Repetitions
	obj["min"] = nest(r.Min)
	obj["max"] = nest(r.Max)
	if len(r.Errors) > 0 {
		obj["errors"] = r.Errors
	}
	if r.OverheadPct != nil {
		obj["overhead_pct"] = *r.OverheadPct
	}
	if r.ServiceOverhead != nil {
		obj["service_overhead"] = r.ServiceOverhead
	}
	for k, v := range r.Labels {
		obj[k] = v
	}
	for k, v := range r.Series {
		obj[k] = v
	}
	for k, v := range r.Texts {
		put(obj, k, v)
	}
	return json.Marshal(obj)
}

// nest turns dotted names into nested objects.
func nest(flat map[string]float64) map[string]any {
	out := map[string]any{}
	for name, v := range flat {
		put(out, name, v)
	}
	return out
}

// put sets the dotted name in out to v, making the nested objects.
func put(out map[string]any, name string, v any) {
	parts := strings.Split(name, ".")
	cur := out
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	cur[parts[len(parts)-1]] = v
}

// ServiceOverhead is what a Service adds to a path: the pod-service
// row against pod-pod cross node of the same backend (the same pods, the
// Service's DNAT the only difference). Each figure is present only when
// both rows have it.
type ServiceOverhead struct {
	// TCPPct is how much lower the median TCP receiver throughput is
	// through the Service, in percent (negative: higher).
	TCPPct *float64 `json:"tcp_pct,omitempty"`
	// UDPPct is the same for the UDP receiver throughput.
	UDPPct *float64 `json:"udp_pct,omitempty"`
	// RRAddedMs is how much longer the median request/response round
	// trip (rtt_ms.p50) is through the Service, in milliseconds.
	RRAddedMs *float64 `json:"rr_added_ms,omitempty"`
}

// ServiceOverheadOf returns the Service's overhead for a pod-service row
// (see ServiceOverhead), and false for other rows or when it has no
// pod-pod cross node row of its backend to compare with.
func ServiceOverheadOf(rows []Row, r Row) (ServiceOverhead, bool) {
	if r.Connection != PodService {
		return ServiceOverhead{}, false
	}
	for _, c := range rows {
		if c.Connection != PodPodCrossNode || c.Backend != r.Backend {
			continue
		}
		var so ServiceOverhead
		drop := func(key string) *float64 {
			base, ok1 := c.Median[key]
			v, ok2 := r.Median[key]
			if !ok1 || !ok2 || base <= 0 {
				return nil
			}
			pct := 100 * (base - v) / base
			return &pct
		}
		so.TCPPct, so.UDPPct = drop("throughput_bps.receiver"), drop("udp.throughput_bps.receiver")
		base, ok1 := c.Median["rtt_ms.p50"]
		v, ok2 := r.Median["rtt_ms.p50"]
		if ok1 && ok2 {
			added := v - base
			so.RRAddedMs = &added
		}
		return so, true
	}
	return ServiceOverhead{}, false
}

// SetOverhead sets OverheadPct on every row that has one (see Overhead),
// and ServiceOverhead on the pod-service rows.
func SetOverhead(rows []Row) {
	for i := range rows {
		if v, ok := Overhead(rows, rows[i]); ok {
			rows[i].OverheadPct = &v
		}
		if so, ok := ServiceOverheadOf(rows, rows[i]); ok {
			rows[i].ServiceOverhead = &so
		}
	}
}
