package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/metrics/promtooltest"
	"github.com/cnperf/cnperf/internal/store"
)

// finishScheduleRun stores one finished run of schedule sc with summary.
func finishScheduleRun(t *testing.T, st store.Store, sc store.Schedule, due time.Time, state store.ScheduleRunState, sum *api.ScheduleSummary) {
	t.Helper()
	ctx := context.Background()
	rec, err := st.StartScheduleRun(ctx, sc.ID, due, due.Add(sc.Every), due, due.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var raw json.RawMessage
	if sum != nil {
		if raw, err = json.Marshal(sum); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.FinishScheduleRun(ctx, rec.ID, state, "", []string{"r"}, raw, due.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
}

func pairRow(src, dst string, bps, rttMs, lossPct float64, outlier string) api.SummaryRow {
	r := api.SummaryRow{Labels: map[string]string{"src_node": src, "dst_node": dst},
		Median: map[string]float64{"throughput_bps.receiver": bps, "rtt_ms.p50": rttMs, "rtt_ms.p99": 2 * rttMs, "ping.rtt_ms.avg": rttMs, "udp.loss_pct": lossPct}}
	if outlier != "" {
		r.Labels["outlier"] = outlier
	}
	return r
}

// TestScheduleMetrics: the matrix's figures come from each schedule's
// latest succeeded run only (an older run's pairs are gone), a failed
// latest run says so without hiding the last figures, the SLO verdict is
// exported, and every schedule metric the Grafana dashboard queries is
// served.
func TestScheduleMetrics(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	t0 := f.now
	sc, err := f.st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: []byte(`{}`), NextAt: t0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	old := &api.ScheduleSummary{Pairs: 2, Rows: []api.SummaryRow{pairRow("n1", "n9", 1e9, 0.1, 0, ""), pairRow("n9", "n1", 1e9, 0.1, 0, "")}}
	finishScheduleRun(t, f.st, sc, t0, store.ScheduleSucceeded, old)
	latest := &api.ScheduleSummary{Pairs: 2, Rows: []api.SummaryRow{pairRow("n1", "n2", 2e9, 0.2, 0.5, ""), pairRow("n2", "n1", 1e8, 0.3, 40, "TCP throughput far below"),
		{Labels: map[string]string{"node": "n1"}, Median: map[string]float64{"throughput_out_bps": 2e9}}},
		SLO: &api.SLOVerdict{Pass: false, Checks: 4, Failed: 1}}
	finishScheduleRun(t, f.st, sc, t0.Add(time.Hour), store.ScheduleSucceeded, latest)
	finishScheduleRun(t, f.st, sc, t0.Add(2*time.Hour), store.ScheduleFailed, nil)

	exp := metrics.New(f.st, metrics.Options{})
	t.Logf("%s", promtooltest.Run(t, bytes.NewReader(scrapeText(t, exp.Handler())), "check", "metrics"))
	fams := scrape(t, exp.Handler())
	pair := func(src, dst string) map[string]string {
		return map[string]string{"schedule": sc.ID, "src_node": src, "dst_node": dst}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cnperf_matrix_pair_throughput_bytes_per_second", pair("n1", "n2"), 2e9 / 8},
		{"cnperf_matrix_pair_throughput_bytes_per_second", pair("n2", "n1"), 1e8 / 8},
		{"cnperf_matrix_pair_loss_ratio", pair("n2", "n1"), 0.4},
		{"cnperf_matrix_pair_outlier", pair("n2", "n1"), 1},
		{"cnperf_matrix_pair_outlier", pair("n1", "n2"), 0},
		{"cnperf_matrix_pairs", map[string]string{"schedule": sc.ID}, 2},
		{"cnperf_schedule_slo_pass", map[string]string{"schedule": sc.ID, "suite": "matrix"}, 0},
		{"cnperf_schedule_slo_failed_checks", map[string]string{"schedule": sc.ID}, 1},
		{"cnperf_schedule_last_run_success", map[string]string{"schedule": sc.ID}, 0},
	} {
		if got := gauge(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	rr := pair("n1", "n2")
	rr["probe"], rr["stat"] = "rr", "p99"
	if got := gauge(t, fams, "cnperf_matrix_pair_rtt_seconds", rr); got != 0.0004 {
		t.Errorf("rr p99 %v s, want 0.0004", got)
	}
	// Bounded: only the latest run's pairs (not n1-n9 of the older run).
	if n := len(fams["cnperf_matrix_pair_throughput_bytes_per_second"].GetMetric()); n != 2 {
		t.Errorf("%d throughput series, want the latest run's 2 pairs", n)
	}
	for _, name := range []string{"cnperf_matrix_pair_throughput_bytes_per_second", "cnperf_matrix_pair_outlier"} {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "n9" {
					t.Errorf("%s still has the older run's node n9", name)
				}
			}
		}
	}

	dash, err := os.ReadFile("../../deploy/grafana/cnperf-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range regexp.MustCompile(`cnperf_[a-z_]+`).FindAllString(string(dash), -1) {
		if !strings.HasPrefix(name, "cnperf_matrix_") && !strings.HasPrefix(name, "cnperf_schedule_") {
			continue
		}
		n++
		if _, ok := fams[name]; !ok {
			t.Errorf("the Grafana dashboard queries %s, which /metrics does not serve", name)
		}
	}
	if n < 4 {
		t.Errorf("the Grafana dashboard queries %d schedule metrics, want the matrix panels'", n)
	}
}
