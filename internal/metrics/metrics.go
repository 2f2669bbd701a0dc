// Package metrics exports the control plane's state to Prometheus: agents
// by status, nodes with an agent online, tasks and runs by state, and the
// latest measured figures per source node, destination node and path kind
// (throughput, round-trip quantiles, loss, jitter).
//
// It uses its own registry, never the global one. Label sets are bounded:
// path kind and probe take a handful of fixed values, and at most MaxPaths
// node pairs are kept (the least recently measured pair is dropped first),
// so the number of series does not grow with the number of agents or
// tasks. The exporter reads the store at scrape time; it follows finished
// tasks with a cursor, so a scrape reads only what is new (at most
// ScanLimit tasks per scrape; after a restart it catches up over several
// scrapes). Concurrent scrapes share one gathering (gather.go).
//
// Schedules (schedules.go): per schedule, its latest finished run and SLO
// verdict; and the matrix's per-node aggregates and budgeted pairs of the
// latest succeeded run of each schedule only, so a pair that is gone
// leaves with the next run. A run's summary is read and turned into
// metrics once, at the first scrape after the run: later scrapes make a
// few small reads a schedule, whatever the matrix's size.
package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

// Path kinds, the values of the "path" label. They follow the suites'
// connection names; "node-pod" is a host-network agent and a pod.
const (
	PathSameNode  = suite.PodPodSameNode
	PathCrossNode = suite.PodPodCrossNode
	PathNodeNode  = suite.NodeNode
	PathMixed     = "node-pod"
)

// Options tune an Exporter.
type Options struct {
	// MaxPaths bounds the node pairs (with their path kind) kept; default 500.
	MaxPaths int
	// ScanLimit bounds the finished tasks read per scrape; default 5000.
	ScanLimit int
	// Timeout bounds one scrape's store reads; default 10 s.
	Timeout time.Duration
	// PairBudget bounds the matrix's node pairs exported per schedule
	// (cnperf_matrix_pair_*): the outliers first, then the slowest; the
	// rest only count in the per-node aggregates. Default 50.
	PairBudget int
	Logger     *slog.Logger
}

// DefaultPairBudget is Options.PairBudget's default.
const DefaultPairBudget = 50

// pathKey is one exported label set.
type pathKey struct{ src, dst, path string }

// figures are the latest figures of one path; nil means never measured.
type figures struct {
	at       time.Time
	tcpBps   *float64
	udpBps   *float64
	rrRTT    *stats.Summary // ms
	pingRTT  *stats.Summary // ms
	stampRTT *stats.Summary // ms
	// stampLossPct is a stamp test's loss: round trip, then forward and
	// reverse when the reflector's sequence numbers told them apart.
	stampLossPct [3]*float64
	udpLossPct   *float64
	pingLossPct  *float64
	udpJitterMs  *float64
}

// Exporter is a prometheus.Collector over a store.
type Exporter struct {
	st   store.Store
	opts Options
	log  *slog.Logger

	mu      sync.Mutex // guards cursor, latest and evicted
	cursor  int64      // last task ID folded into latest
	latest  map[pathKey]*figures
	evicted float64

	summaryMu sync.Mutex                // guards summaries
	summaries map[string]summaryMetrics // by schedule ID (schedules.go)
	gatherer  *sharedGatherer           // its registry's, shared by every Handler

	agents, nodes, tasks, runs *prometheus.Desc
	tput, rtt, loss, jitter    *prometheus.Desc
	measuredAt, evictedDesc    *prometheus.Desc
	pathsDesc                  *prometheus.Desc
	sched                      scheduleDescs // schedules.go
}

// New returns an exporter reading st.
func New(st store.Store, opts Options) *Exporter {
	if opts.MaxPaths <= 0 {
		opts.MaxPaths = 500
	}
	if opts.ScanLimit <= 0 {
		opts.ScanLimit = 5000
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.PairBudget <= 0 {
		opts.PairBudget = DefaultPairBudget
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pl := []string{"src_node", "dst_node", "path"}
	e := &Exporter{st: st, opts: opts, log: opts.Logger, latest: map[pathKey]*figures{}, sched: newScheduleDescs(),
		agents: prometheus.NewDesc("cnperf_agents", "Agents known to the server, by status (free, busy, offline).", []string{"status"}, nil),
		nodes:  prometheus.NewDesc("cnperf_nodes_online", "Nodes with at least one agent online.", nil, nil),
		tasks:  prometheus.NewDesc("cnperf_tasks", "Tasks in the store, by state.", []string{"state"}, nil),
		runs:   prometheus.NewDesc("cnperf_runs", "Runs in the store, by state.", []string{"state"}, nil),
		tput: prometheus.NewDesc("cnperf_path_throughput_bytes_per_second",
			"Latest throughput measured at the receiver in bytes per second (Prometheus's base unit; x8 for bit/s), by probe (tcp, udp).", append(pl, "probe"), nil),
		rtt: prometheus.NewDesc("cnperf_path_rtt_seconds",
			"Latest round-trip times as a summary (quantiles 0.5, 0.9, 0.99; sum and count of the round trips), by probe (rr, ping, stamp).", append(pl, "probe"), nil),
		loss: prometheus.NewDesc("cnperf_path_loss_ratio",
			"Latest packet loss as a ratio (0-1), by probe (udp, ping, stamp; stamp-forward and stamp-reverse per direction).", append(pl, "probe"), nil),
		jitter: prometheus.NewDesc("cnperf_path_jitter_seconds",
			"Latest UDP interarrival jitter (RFC 3550).", pl, nil),
		measuredAt: prometheus.NewDesc("cnperf_path_last_measured_timestamp_seconds",
			"When the path's latest figure was measured (Unix time).", pl, nil),
		pathsDesc: prometheus.NewDesc("cnperf_paths_tracked",
			"Node pairs with figures kept (at most the configured maximum).", nil, nil),
		evictedDesc: prometheus.NewDesc("cnperf_paths_evicted_total",
			"Node pairs dropped because more than the maximum were measured.", nil, nil),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewBuildInfoCollector())
	e.gatherer = &sharedGatherer{g: reg}
	return e
}

// Handler serves the exporter's own registry in the Prometheus text
// format, with the Go runtime's, the process's and the build's metrics
// (go_*, process_*, go_build_info) beside cnperf's, as Prometheus users
// expect of any exporter. Concurrent scrapes share one gathering.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: e.opts.Timeout + 5*time.Second})
}

// Describe sends the descriptors of every metric.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{e.agents, e.nodes, e.tasks, e.runs, e.tput, e.rtt, e.loss, e.jitter, e.measuredAt, e.pathsDesc, e.evictedDesc} {
		ch <- d
	}
	e.sched.describe(ch)
}

// Collect reads the store and sends the metrics. A failed read becomes an
// invalid metric (the scrape reports it) instead of a silent gap.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	agents, err := e.st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(e.agents, fmt.Errorf("list agents: %w", err))
		return
	}
	byStatus := map[string]float64{"free": 0, "busy": 0, "offline": 0}
	online := map[string]bool{}
	for _, a := range agents {
		byStatus[a.Status.String()]++
		if a.Status.Online() {
			online[a.NodeName] = true
		}
	}
	for s, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(e.agents, prometheus.GaugeValue, n, s)
	}
	ch <- prometheus.MustNewConstMetric(e.nodes, prometheus.GaugeValue, float64(len(online)))
	for _, s := range store.TaskStates {
		_, n, err := e.st.ListTasks(ctx, store.TaskFilter{State: s}, store.Page{Limit: 1})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(e.tasks, fmt.Errorf("count %s tasks: %w", s, err))
			return
		}
		ch <- prometheus.MustNewConstMetric(e.tasks, prometheus.GaugeValue, float64(n), string(s))
	}
	for _, s := range []store.RunState{store.RunRunning, store.RunSucceeded, store.RunFailed, store.RunCancelled} {
		n, err := e.st.CountRuns(ctx, store.RunFilter{State: s})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(e.runs, fmt.Errorf("count %s runs: %w", s, err))
			return
		}
		ch <- prometheus.MustNewConstMetric(e.runs, prometheus.GaugeValue, float64(n), string(s))
	}
	if err := e.collectSchedules(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(e.sched.lastSuccess, err)
	}
	if err := e.scan(ctx, agents); err != nil {
		ch <- prometheus.NewInvalidMetric(e.tput, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, f := range e.latest {
		e.collectPath(ch, k, f)
	}
	ch <- prometheus.MustNewConstMetric(e.pathsDesc, prometheus.GaugeValue, float64(len(e.latest)))
	ch <- prometheus.MustNewConstMetric(e.evictedDesc, prometheus.CounterValue, e.evicted)
}

func (e *Exporter) collectPath(ch chan<- prometheus.Metric, k pathKey, f *figures) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{k.src, k.dst, k.path}, labels...)...)
	}
	if f.tcpBps != nil {
		gauge(e.tput, *f.tcpBps/8, "tcp")
	}
	if f.udpBps != nil {
		gauge(e.tput, *f.udpBps/8, "udp")
	}
	for _, p := range []struct {
		probe string
		s     *stats.Summary
	}{{"rr", f.rrRTT}, {"ping", f.pingRTT}, {"stamp", f.stampRTT}} {
		if p.s == nil {
			continue
		}
		// A summary, not a gauge with a quantile label: promtool and
		// Prometheus reserve "quantile" for summaries.
		q := map[float64]float64{0.5: p.s.P50 / 1000, 0.9: p.s.P90 / 1000, 0.99: p.s.P99 / 1000}
		ch <- prometheus.MustNewConstSummary(e.rtt, uint64(max(p.s.Count, 0)), p.s.Avg*float64(p.s.Count)/1000, q, k.src, k.dst, k.path, p.probe)
	}
	if f.udpLossPct != nil {
		gauge(e.loss, *f.udpLossPct/100, "udp")
	}
	if f.pingLossPct != nil {
		gauge(e.loss, *f.pingLossPct/100, "ping")
	}
	for i, name := range []string{"stamp", "stamp-forward", "stamp-reverse"} {
		if v := f.stampLossPct[i]; v != nil {
			gauge(e.loss, *v/100, name)
		}
	}
	if f.udpJitterMs != nil {
		gauge(e.jitter, *f.udpJitterMs/1000)
	}
	gauge(e.measuredAt, float64(f.at.UnixNano())/1e9)
}

// scan folds the succeeded tasks after the cursor into latest.
func (e *Exporter) scan(ctx context.Context, agents []store.Agent) error {
	byUID := make(map[string]store.Agent, len(agents))
	for _, a := range agents {
		byUID[a.PodUID] = a
	}
	e.mu.Lock()
	cursor := e.cursor
	e.mu.Unlock()
	read := 0
	for read < e.opts.ScanLimit {
		limit := min(store.MaxPageLimit, e.opts.ScanLimit-read)
		ts, _, err := e.st.ListTasks(ctx, store.TaskFilter{State: store.TaskSucceeded}, store.Page{Limit: limit, AfterID: cursor})
		if err != nil {
			return fmt.Errorf("list finished tasks: %w", err)
		}
		e.mu.Lock()
		for _, t := range ts {
			e.fold(t, byUID)
			cursor = t.ID
		}
		e.cursor = cursor
		e.mu.Unlock()
		read += len(ts)
		if len(ts) < limit {
			break
		}
	}
	return nil
}

// PathOf names the path between two agents.
func PathOf(src, dst store.Agent) string {
	switch {
	case src.HostNetwork && dst.HostNetwork:
		return PathNodeNode
	case src.HostNetwork != dst.HostNetwork:
		return PathMixed
	case src.NodeName == dst.NodeName:
		return PathSameNode
	}
	return PathCrossNode
}

// fold records one task's figures. e.mu must be held.
func (e *Exporter) fold(t store.Task, byUID map[string]store.Agent) {
	if len(t.Result) == 0 {
		return
	}
	src, ok1 := byUID[t.SrcPodUID]
	dst, ok2 := byUID[t.DstPodUID]
	if !ok1 || !ok2 {
		return
	}
	var res probe.Result
	if err := json.Unmarshal(t.Result, &res); err != nil {
		e.log.Debug("metrics: unreadable result", "task_id", t.TaskID, "err", err)
		return
	}
	k := pathKey{src.NodeName, dst.NodeName, PathOf(src, dst)}
	f, ok := e.latest[k]
	if !ok {
		if len(e.latest) >= e.opts.MaxPaths {
			e.evictOldest()
		}
		f = &figures{}
		e.latest[k] = f
	}
	at := res.StartedAt
	if t.FinishedAt != nil {
		at = *t.FinishedAt
	}
	if at.After(f.at) {
		f.at = at
	}
	switch res.Kind {
	case probe.KindTCP:
		if res.ThroughputBps != nil {
			f.tcpBps = probe.Float(res.ThroughputBps.Receiver)
		}
	case probe.KindUDP:
		if res.ThroughputBps != nil {
			f.udpBps = probe.Float(res.ThroughputBps.Receiver)
		}
		if res.LossPct != nil {
			f.udpLossPct = res.LossPct
		}
		if res.JitterMs != nil {
			f.udpJitterMs = res.JitterMs
		}
	case probe.KindRR:
		if res.RTTms != nil {
			f.rrRTT = res.RTTms
		}
	case probe.KindStamp:
		if res.RTTms != nil {
			f.stampRTT = res.RTTms
		}
		f.stampLossPct = [3]*float64{res.LossPct}
		if res.Forward != nil && res.Reverse != nil {
			f.stampLossPct[1], f.stampLossPct[2] = res.Forward.LossPct, res.Reverse.LossPct
		}
	case probe.KindPing:
		if res.RTTms != nil {
			f.pingRTT = res.RTTms
		}
		if res.LossPct != nil {
			f.pingLossPct = res.LossPct
		}
	}
}

// evictOldest drops the least recently measured path. e.mu must be held.
func (e *Exporter) evictOldest() {
	var oldest pathKey
	first := true
	var at time.Time
	for k, f := range e.latest {
		if first || f.at.Before(at) || f.at.Equal(at) && less(k, oldest) {
			oldest, at, first = k, f.at, false
		}
	}
	if !first {
		delete(e.latest, oldest)
		e.evicted++
	}
}

func less(a, b pathKey) bool {
	if a.src != b.src {
		return a.src < b.src
	}
	if a.dst != b.dst {
		return a.dst < b.dst
	}
	return a.path < b.path
}
