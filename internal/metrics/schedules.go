package metrics

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// scheduleDescs are the schedules' metrics: per schedule, its latest
// finished run and SLO verdict; per node pair of the latest succeeded run
// of each schedule (so the series are bounded by the pairs of one run per
// schedule, and a pair that left the cluster goes with the next run), the
// matrix's figures and outlier flag.
type scheduleDescs struct {
	lastSuccess, lastFinished, sloPass, sloFailed *prometheus.Desc
	pairTput, pairRTT, pairLoss, pairOutlier      *prometheus.Desc
	pairsDesc                                     *prometheus.Desc
	nodeTput, nodeRTT                             *prometheus.Desc
}

func newScheduleDescs() scheduleDescs {
	sl := []string{"schedule", "suite"}
	pl := []string{"schedule", "src_node", "dst_node"}
	return scheduleDescs{
		lastSuccess: prometheus.NewDesc("cnperf_schedule_last_run_success",
			"1 when the schedule's latest finished run succeeded (the suite ran), 0 when it failed.", sl, nil),
		lastFinished: prometheus.NewDesc("cnperf_schedule_last_run_finished_timestamp_seconds",
			"When the schedule's latest finished run ended (Unix time).", sl, nil),
		sloPass: prometheus.NewDesc("cnperf_schedule_slo_pass",
			"1 when every SLO check of the schedule's latest succeeded run passed, else 0 (only schedules with an SLO).", sl, nil),
		sloFailed: prometheus.NewDesc("cnperf_schedule_slo_failed_checks",
			"SLO checks that failed in the schedule's latest succeeded run.", sl, nil),
		pairTput: prometheus.NewDesc("cnperf_matrix_pair_throughput_bytes_per_second",
			"TCP throughput at the receiver in bytes per second of each node pair in the latest run of a schedule (median of repetitions).", pl, nil),
		pairRTT: prometheus.NewDesc("cnperf_matrix_pair_rtt_seconds",
			"Round trip of each node pair in the latest run of a schedule: probe rr (stat p50, p99) and ping (stat avg).", append(pl, "probe", "stat"), nil),
		pairLoss: prometheus.NewDesc("cnperf_matrix_pair_loss_ratio",
			"UDP loss (0-1) at the matrix's set rate of each node pair in the latest run of a schedule.", pl, nil),
		pairOutlier: prometheus.NewDesc("cnperf_matrix_pair_outlier",
			"1 when the matrix flagged the node pair as an outlier in the latest run of a schedule, else 0.", pl, nil),
		pairsDesc: prometheus.NewDesc("cnperf_matrix_pairs",
			"Node pairs with figures in the latest run of each schedule.", []string{"schedule"}, nil),
		nodeTput: prometheus.NewDesc("cnperf_matrix_node_throughput_bytes_per_second",
			"TCP throughput at the receiver of a node's pairs in the latest run of a schedule, by direction (out: the node sends, in: it receives) and stat (median, worst: its slowest peer).", []string{"schedule", "node", "direction", "stat"}, nil),
		nodeRTT: prometheus.NewDesc("cnperf_matrix_node_rtt_seconds",
			"RR round trip p50 of a node's pairs in the latest run of a schedule, by direction and stat (median, worst: its slowest peer).", []string{"schedule", "node", "direction", "stat"}, nil),
	}
}

func (d scheduleDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.lastSuccess, d.lastFinished, d.sloPass, d.sloFailed, d.pairTput, d.pairRTT, d.pairLoss, d.pairOutlier, d.pairsDesc, d.nodeTput, d.nodeRTT} {
		ch <- x
	}
}

// summaryMetrics are the metrics of one schedule run's summary, kept
// until a later run of the schedule succeeds: a large matrix's summary
// is megabytes to read and decode, and it changes once a run.
type summaryMetrics struct {
	record  int64 // the schedule run record they come from
	metrics []prometheus.Metric
}

// collectSchedules reads each schedule's latest finished runs and sends
// their metrics: a few small reads a schedule, whatever the matrix's
// size; the summary of a schedule's latest succeeded run is read and
// turned into metrics once, when it is new.
func (e *Exporter) collectSchedules(ctx context.Context, ch chan<- prometheus.Metric) error {
	scs, err := e.st.ListSchedules(ctx)
	if err != nil {
		return fmt.Errorf("list schedules: %w", err)
	}
	e.summaryMu.Lock()
	defer e.summaryMu.Unlock()
	kept := make(map[string]summaryMetrics, len(scs)) // a deleted schedule's go
	d := e.sched
	for _, sc := range scs {
		runs, err := e.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Finished: true, Limit: 1, NoSummary: true})
		if err != nil {
			return fmt.Errorf("schedule %s's runs: %w", sc.ID, err)
		}
		if len(runs) == 0 {
			continue
		}
		last := runs[0]
		ok := 0.0
		if last.State == store.ScheduleSucceeded {
			ok = 1
		}
		ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, ok, sc.ID, sc.Suite)
		if last.FinishedAt != nil {
			ch <- prometheus.MustNewConstMetric(d.lastFinished, prometheus.GaugeValue, float64(last.FinishedAt.UnixNano())/1e9, sc.ID, sc.Suite)
		}
		if last.State != store.ScheduleSucceeded {
			// The figures stay those of the latest run that succeeded.
			good, err := e.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: store.ScheduleSucceeded, Limit: 1, NoSummary: true})
			if err != nil {
				return fmt.Errorf("schedule %s's runs: %w", sc.ID, err)
			}
			if len(good) == 0 {
				continue
			}
			last = good[0]
		}
		sm, ok2 := e.summaries[sc.ID]
		if !ok2 || sm.record != last.ID {
			if sm, err = e.readSummary(ctx, sc); err != nil {
				return err
			}
		}
		kept[sc.ID] = sm
		for _, m := range sm.metrics {
			ch <- m
		}
	}
	e.summaries = kept
	return nil
}

// readSummary reads the summary of sc's latest succeeded run and turns
// it into metrics.
func (e *Exporter) readSummary(ctx context.Context, sc store.Schedule) (summaryMetrics, error) {
	runs, err := e.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: store.ScheduleSucceeded, Limit: 1})
	if err != nil {
		return summaryMetrics{}, fmt.Errorf("schedule %s's runs: %w", sc.ID, err)
	}
	if len(runs) == 0 { // deleted since
		return summaryMetrics{}, nil
	}
	sm := summaryMetrics{record: runs[0].ID}
	sum, err := schedule.DecodeSummary(runs[0].Summary)
	if err != nil {
		e.log.Debug("metrics: unreadable schedule summary", "schedule", sc.ID, "record", runs[0].ID, "err", err)
	} else if sum != nil {
		sm.metrics = e.summaryMetrics(sc, *sum)
	}
	return sm, nil
}

// summaryMetrics turns a run's summary into its metrics: the SLO
// verdict, each node's aggregates and the budgeted pairs' figures.
func (e *Exporter) summaryMetrics(sc store.Schedule, sum api.ScheduleSummary) []prometheus.Metric {
	d := e.sched
	var out []prometheus.Metric
	if v := sum.SLO; v != nil {
		pass := 0.0
		if v.Pass {
			pass = 1
		}
		out = append(out, prometheus.MustNewConstMetric(d.sloPass, prometheus.GaugeValue, pass, sc.ID, sc.Suite),
			prometheus.MustNewConstMetric(d.sloFailed, prometheus.GaugeValue, float64(v.Failed), sc.ID, sc.Suite))
	}
	var pairs []api.SummaryRow
	for _, r := range sum.Rows {
		if r.Labels[matrix.LabelSrc] != "" && r.Labels[matrix.LabelDst] != "" {
			pairs = append(pairs, r)
		}
	}
	if len(pairs) == 0 {
		return out
	}
	out = append(out, prometheus.MustNewConstMetric(d.pairsDesc, prometheus.GaugeValue, float64(len(pairs)), sc.ID))
	out = e.nodeMetrics(out, sc, pairs)
	for _, r := range budgeted(pairs, e.opts.PairBudget) {
		src, dst := r.Labels[matrix.LabelSrc], r.Labels[matrix.LabelDst]
		gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
			out = append(out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{sc.ID, src, dst}, extra...)...))
		}
		if v, ok := r.Median["throughput_bps.receiver"]; ok {
			gauge(d.pairTput, v/8)
		}
		for _, q := range []struct{ key, probe, stat string }{
			{"rtt_ms.p50", "rr", "p50"}, {"rtt_ms.p99", "rr", "p99"}, {"ping.rtt_ms.avg", "ping", "avg"},
		} {
			if v, ok := r.Median[q.key]; ok {
				gauge(d.pairRTT, v/1000, q.probe, q.stat)
			}
		}
		if v, ok := r.Median["udp.loss_pct"]; ok {
			gauge(d.pairLoss, v/100)
		}
		flagged := 0.0
		if r.Labels[matrix.LabelOutlier] != "" {
			flagged = 1
		}
		gauge(d.pairOutlier, flagged)
	}
	return out
}

// budgeted are at most n of pairs: the outliers first, then the slowest
// by TCP throughput, in that order.
func budgeted(pairs []api.SummaryRow, n int) []api.SummaryRow {
	if len(pairs) <= n {
		return pairs
	}
	sorted := slices.Clone(pairs)
	slices.SortStableFunc(sorted, func(a, b api.SummaryRow) int {
		ao, bo := a.Labels[matrix.LabelOutlier] != "", b.Labels[matrix.LabelOutlier] != ""
		if ao != bo {
			if ao {
				return -1
			}
			return 1
		}
		return cmp.Compare(tputOr(a), tputOr(b))
	})
	return sorted[:n]
}

func tputOr(r api.SummaryRow) float64 {
	if v, ok := r.Median["throughput_bps.receiver"]; ok {
		return v
	}
	return math.Inf(1)
}

// nodeMetrics appends each node's aggregates over its pairs: throughput
// out and in and RR p50 out and in, the median and the worst peer's.
func (e *Exporter) nodeMetrics(out []prometheus.Metric, sc store.Schedule, pairs []api.SummaryRow) []prometheus.Metric {
	d := e.sched
	type acc struct{ tput, rtt map[string][]float64 }
	nodes := map[string]*acc{}
	add := func(node, dir string, r api.SummaryRow) {
		a := nodes[node]
		if a == nil {
			a = &acc{tput: map[string][]float64{}, rtt: map[string][]float64{}}
			nodes[node] = a
		}
		if v, ok := r.Median["throughput_bps.receiver"]; ok {
			a.tput[dir] = append(a.tput[dir], v/8)
		}
		if v, ok := r.Median["rtt_ms.p50"]; ok {
			a.rtt[dir] = append(a.rtt[dir], v/1000)
		}
	}
	for _, r := range pairs {
		add(r.Labels[matrix.LabelSrc], "out", r)
		add(r.Labels[matrix.LabelDst], "in", r)
	}
	for node, a := range nodes {
		for _, dir := range []string{"out", "in"} {
			if vs := a.tput[dir]; len(vs) > 0 {
				out = append(out, prometheus.MustNewConstMetric(d.nodeTput, prometheus.GaugeValue, suite.Median(vs), sc.ID, node, dir, "median"))
				out = append(out, prometheus.MustNewConstMetric(d.nodeTput, prometheus.GaugeValue, slices.Min(vs), sc.ID, node, dir, "worst"))
			}
			if vs := a.rtt[dir]; len(vs) > 0 {
				out = append(out, prometheus.MustNewConstMetric(d.nodeRTT, prometheus.GaugeValue, suite.Median(vs), sc.ID, node, dir, "median"))
				out = append(out, prometheus.MustNewConstMetric(d.nodeRTT, prometheus.GaugeValue, slices.Max(vs), sc.ID, node, dir, "worst"))
			}
		}
	}
	return out
}
