package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/store"
)

// TestMatrixPairBudget: with 20 nodes (380 pairs) and a budget of 10,
// only 10 pairs are exported, the outliers among them; every node has
// its aggregates (throughput and RR p50, out and in, median and worst),
// and a node's worst peer is its slowest pair.
func TestMatrixPairBudget(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	sc, err := f.st.CreateSchedule(ctx, store.Schedule{Suite: "matrix", Every: time.Hour, Options: []byte(`{}`), NextAt: f.now}, f.now)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	sum := &api.ScheduleSummary{}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			bps, out := 8e9, ""
			if i == 3 && j == 7 {
				bps, out = 8e8, "slow"
			}
			sum.Rows = append(sum.Rows, pairRow(fmt.Sprintf("n%02d", i), fmt.Sprintf("n%02d", j), bps, 0.1, 0, out))
		}
	}
	sum.Pairs = len(sum.Rows)
	finishScheduleRun(t, f.st, sc, f.now, store.ScheduleSucceeded, sum)
	exp := metrics.New(f.st, metrics.Options{PairBudget: 10})
	fams := scrape(t, exp.Handler())
	if got := len(fams["cnperf_matrix_pair_throughput_bytes_per_second"].GetMetric()); got != 10 {
		t.Errorf("%d pair throughput series, want the budget's 10", got)
	}
	if got := gauge(t, fams, "cnperf_matrix_pair_outlier", map[string]string{"src_node": "n03", "dst_node": "n07"}); got != 1 {
		t.Errorf("the outlier pair n03 → n07 not exported as one (%v)", got)
	}
	if got := len(fams["cnperf_matrix_node_throughput_bytes_per_second"].GetMetric()); got != n*4 {
		t.Errorf("%d node throughput series, want %d (out, in × median, worst)", got, n*4)
	}
	if got := len(fams["cnperf_matrix_node_rtt_seconds"].GetMetric()); got != n*4 {
		t.Errorf("%d node rtt series, want %d", got, n*4)
	}
	for _, c := range []struct {
		node, dir, stat string
		want            float64
	}{{"n03", "out", "worst", 1e8}, {"n03", "out", "median", 1e9}, {"n07", "in", "worst", 1e8}, {"n05", "in", "worst", 1e9}} {
		l := map[string]string{"node": c.node, "direction": c.dir, "stat": c.stat}
		if got := gauge(t, fams, "cnperf_matrix_node_throughput_bytes_per_second", l); got != c.want {
			t.Errorf("node throughput %v = %v, want %v", l, got, c.want)
		}
	}
}
