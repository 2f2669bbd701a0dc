package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestMatrixResultKeepsCoverage: a succeeded result of a matrix run's
// task is kept as its node pair's coverage with the pair's figures; a
// result of another suite's run is not; GET /api/v2/matrix/coverage
// answers both ordered pairs of the two nodes, the one not measured
// without a time.
func TestMatrixResultKeepsCoverage(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	ctx := context.Background()
	f.twoAgents()
	for _, su := range []string{"baseline", "matrix"} {
		if _, err := f.user.CreateRun(ctx, api.RunCreate{Suite: su, Tasks: []api.RunTask{{Src: "uid-a", Dst: "uid-b", Spec: &probe.Spec{Kind: "rr"}}}}); err != nil {
			t.Fatal(err)
		}
		fr, err := f.agent.Fetch(ctx, "uid-a", 0)
		if err != nil || len(fr.Tasks) != 1 {
			t.Fatalf("fetch: %+v %v", fr, err)
		}
		res, _ := json.Marshal(probe.Result{Kind: "rr", RTTms: &probe.Summary{P50: 0.25, P99: 0.5, Count: 100}})
		if _, err := f.agent.Report(ctx, api.Report{TaskID: fr.Tasks[0].TaskID, PodUID: "uid-a", ReportID: "r-" + su, State: api.StateSucceeded, Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	pairs, err := f.st.ListMatrixPairs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 1 || pairs[0].Src != "node-1" || pairs[0].Dst != "node-2" || pairs[0].Measure != "rr" {
		t.Fatalf("coverage %+v, want node-1 → node-2 rr (the matrix run's only)", pairs)
	}
	var fig map[string]float64
	if err := json.Unmarshal([]byte(pairs[0].Figures), &fig); err != nil || fig["rtt_ms.p50"] != 0.25 {
		t.Errorf("figures %s (%v), want rtt_ms.p50 0.25", pairs[0].Figures, err)
	}
	cov, err := f.user.MatrixCoverage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cov.Nodes) != 2 || len(cov.Pairs) != 2 {
		t.Fatalf("coverage %+v, want 2 nodes and 2 ordered pairs", cov)
	}
	for _, p := range cov.Pairs {
		measured := p.MeasuredAt != nil
		if want := p.Src == "node-1"; measured != want || (measured && p.Figures["rtt_ms.p50"] != 0.25) {
			t.Errorf("pair %+v: measured %v, want %v with rtt_ms.p50 0.25", p, measured, want)
		}
		if got := p.Overdue(cov.At, time.Hour); got == measured {
			t.Errorf("pair %s → %s: overdue %v, want %v", p.Src, p.Dst, got, !measured)
		}
	}
}
