package metrics

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
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
	}
}

func (d scheduleDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.lastSuccess, d.lastFinished, d.sloPass, d.sloFailed, d.pairTput, d.pairRTT, d.pairLoss, d.pairOutlier, d.pairsDesc} {
		ch <- x
	}
}

// collectSchedules reads each schedule's latest finished runs and sends
// their metrics.
func (e *Exporter) collectSchedules(ctx context.Context, ch chan<- prometheus.Metric) error {
	scs, err := e.st.ListSchedules(ctx)
	if err != nil {
		return fmt.Errorf("list schedules: %w", err)
	}
	d := e.sched
	for _, sc := range scs {
		runs, err := e.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Finished: true, Limit: 1})
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
			good, err := e.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, State: store.ScheduleSucceeded, Limit: 1})
			if err != nil {
				return fmt.Errorf("schedule %s's runs: %w", sc.ID, err)
			}
			if len(good) == 0 {
				continue
			}
			last = good[0]
		}
		sum, err := schedule.DecodeSummary(last.Summary)
		if err != nil {
			e.log.Debug("metrics: unreadable schedule summary", "schedule", sc.ID, "record", last.ID, "err", err)
		} else if sum != nil {
			e.collectSummary(ch, sc, *sum)
		}
	}
	return nil
}

func (e *Exporter) collectSummary(ch chan<- prometheus.Metric, sc store.Schedule, sum api.ScheduleSummary) {
	d := e.sched
	if v := sum.SLO; v != nil {
		pass := 0.0
		if v.Pass {
			pass = 1
		}
		ch <- prometheus.MustNewConstMetric(d.sloPass, prometheus.GaugeValue, pass, sc.ID, sc.Suite)
		ch <- prometheus.MustNewConstMetric(d.sloFailed, prometheus.GaugeValue, float64(v.Failed), sc.ID, sc.Suite)
	}
	pairs := 0
	for _, r := range sum.Rows {
		src, dst := r.Labels[matrix.LabelSrc], r.Labels[matrix.LabelDst]
		if src == "" || dst == "" {
			continue
		}
		pairs++
		gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{sc.ID, src, dst}, extra...)...)
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
		out := 0.0
		if r.Labels[matrix.LabelOutlier] != "" {
			out = 1
		}
		gauge(d.pairOutlier, out)
	}
	if pairs > 0 {
		ch <- prometheus.MustNewConstMetric(d.pairsDesc, prometheus.GaugeValue, float64(pairs), sc.ID)
	}
}
