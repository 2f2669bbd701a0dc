package storetest

import (
	"context"
	"slices"
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
	rec("n3", "n1", "ping", "r1", 13, `{}`)
	got, err := st.ListMatrixPairs(ctx, []string{"n2", "n1"})
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
	// A listing is a page of senders: none, or more than the bound, is
	// refused rather than read whole.
	if _, err := st.ListMatrixPairs(ctx, nil); err == nil {
		t.Error("a listing of no senders (the whole matrix) was answered")
	}
	if _, err := st.ListMatrixPairs(ctx, make([]string, store.MaxMatrixSenders+1)); err == nil {
		t.Errorf("a listing of %d senders was answered", store.MaxMatrixSenders+1)
	}
	rec("n1", "n4", "rr", "r1", 14, `{}`) // n4 only receives
	// Pairs n1→n2 (oldest kind at 11), n2→n1 (12), n3→n1 (13), n1→n4 (14).
	nodes, err := st.MatrixNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(nodes)
	if nodes = slices.Compact(nodes); !slices.Equal(nodes, []string{"n1", "n2", "n3", "n4"}) {
		t.Errorf("nodes %q, want n1 to n4", nodes)
	}
	tally, err := st.TallyMatrixPairs(ctx, at(12.5))
	if err != nil {
		t.Fatal(err)
	}
	if tally.Pairs != 4 || tally.Before != 2 || tally.Oldest == nil || !tally.Oldest.Equal(at(11)) {
		t.Errorf("tally %+v (oldest %v), want 4 pairs, 2 before 12.5 s, the oldest at 11 s", tally, tally.Oldest)
	}
}
