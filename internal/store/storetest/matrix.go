package storetest

import (
	"context"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testMatrixPairs: a pair's measurement is kept per kind, a later one
// replaces it, an older one (a late report) does not, and bad names are
// refused.
func testMatrixPairs(t *testing.T, st store.Store) {
	ctx := context.Background()
	rec := func(src, dst, measure, run string, sec float64, fig string) {
		t.Helper()
		if err := st.RecordMatrixPair(ctx, store.MatrixPair{Src: src, Dst: dst, Measure: measure, RunID: run, MeasuredAt: at(sec), Figures: fig}); err != nil {
			t.Fatalf("record %s → %s %s: %v", src, dst, measure, err)
		}
	}
	rec("n1", "n2", "tcp", "r1", 10, `{"throughput_bps.receiver":1e9}`)
	rec("n1", "n2", "rr", "r1", 11, `{"rtt_ms.p50":0.1}`)
	rec("n2", "n1", "tcp", "r1", 12, `{"throughput_bps.receiver":2e9}`)
	rec("n1", "n2", "tcp", "r2", 20, `{"throughput_bps.receiver":3e9}`) // later: replaces
	rec("n2", "n1", "tcp", "r0", 5, `{"throughput_bps.receiver":9e9}`)  // older: ignored
	got, err := st.ListMatrixPairs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.MatrixPair{
		{Src: "n1", Dst: "n2", Measure: "rr", RunID: "r1", MeasuredAt: at(11), Figures: `{"rtt_ms.p50":0.1}`},
		{Src: "n1", Dst: "n2", Measure: "tcp", RunID: "r2", MeasuredAt: at(20), Figures: `{"throughput_bps.receiver":3e9}`},
		{Src: "n2", Dst: "n1", Measure: "tcp", RunID: "r1", MeasuredAt: at(12), Figures: `{"throughput_bps.receiver":2e9}`},
	}
	if len(got) != len(want) {
		t.Fatalf("pairs %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Src != want[i].Src || got[i].Dst != want[i].Dst || got[i].Measure != want[i].Measure || got[i].RunID != want[i].RunID ||
			!got[i].MeasuredAt.Equal(want[i].MeasuredAt) || got[i].Figures != want[i].Figures {
			t.Errorf("pair %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if err := st.RecordMatrixPair(ctx, store.MatrixPair{Src: "", Dst: "n1", Measure: "tcp", MeasuredAt: at(1)}); err == nil {
		t.Error("a pair without a source node was recorded")
	}
}
