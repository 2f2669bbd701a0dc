package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
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
	pairs, err := f.st.ListMatrixPairs(ctx, []string{"node-1", "node-2"})
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
	cov, err := f.user.MatrixCoverage(ctx, api.CoverageQuery{})
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

// TestMatrixCoveragePages: GET /api/v2/matrix/coverage answers a page
// of whole senders' rows of at most limit= pairs, never the whole N²;
// following next= gives every ordered pair once, in node order; the
// first page tallies the whole matrix; only_overdue=1 keeps the overdue
// pairs; a bad limit is refused.
func TestMatrixCoveragePages(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	ctx := context.Background()
	now := f.clock.Now()
	const n = 6 // 30 ordered pairs, 5 a sender
	node := func(i int) string { return fmt.Sprintf("n%d", i) }
	f.beat("uid-5", "pod-5", "10.0.0.5", node(5)) // an agent's node that never sent
	for i := range n {
		for j := range n {
			// n5 never sent; n0's pairs were measured 2 days ago.
			if i == j || i == 5 {
				continue
			}
			age := time.Hour
			if i == 0 {
				age = 48 * time.Hour
			}
			if err := f.st.RecordMatrixPair(ctx, store.MatrixPair{Src: node(i), Dst: node(j), Measure: "tcp", RunID: "r", MeasuredAt: now.Add(-age)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The answer decoded by its JSON names: a page, its cursor and tally.
	type tally struct{ Pairs, Measured, Overdue int }
	type coveragePage struct {
		At    time.Time          `json:"at"`
		Nodes []string           `json:"nodes"`
		Pairs []api.PairCoverage `json:"pairs"`
		Next  string             `json:"next"`
		Tally *tally             `json:"tally"`
	}
	get := func(query string) (int, coveragePage) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", f.ts.URL+"/api/v2/matrix/coverage?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+userTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page coveragePage
		_ = json.NewDecoder(resp.Body).Decode(&page)
		return resp.StatusCode, page
	}
	var seen []string
	pages := 0
	for after, first := "", true; first || after != ""; first = false {
		code, page := get("limit=12&after=" + url.QueryEscape(after))
		if code != 200 {
			t.Fatalf("page after %q: status %d", after, code)
		}
		if pages++; pages > n {
			t.Fatalf("more than %d pages", n)
		}
		if len(page.Pairs) > 12 || len(page.Pairs)%(n-1) != 0 {
			t.Fatalf("page after %q: %d pairs, want whole rows of %d, at most 12", after, len(page.Pairs), n-1)
		}
		if (page.Tally != nil) != first {
			t.Errorf("page after %q: tally %+v, want one on the first page only", after, page.Tally)
		}
		if first && (page.Tally.Pairs != 30 || page.Tally.Measured != 25 || page.Tally.Overdue != 10) {
			t.Errorf("tally %+v, want 30 pairs, 25 measured, 10 overdue (n0's 5 old, n5's 5 never)", *page.Tally)
		}
		for _, p := range page.Pairs {
			if measured := p.MeasuredAt != nil; measured == (p.Src == "n5") {
				t.Errorf("pair %s → %s measured %v", p.Src, p.Dst, measured)
			}
			seen = append(seen, p.Src+">"+p.Dst)
		}
		after = page.Next
	}
	if pages != 3 || len(seen) != n*(n-1) || !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
		t.Errorf("%d pages, pairs %q; want 3 pages of every ordered pair once, in order", pages, seen)
	}
	_, page := get("limit=50000&only_overdue=1&overdue=24h")
	if len(page.Pairs) != 10 || page.Next != "" {
		t.Errorf("only_overdue: %d pairs (next %q), want 10 on one page", len(page.Pairs), page.Next)
	}
	for _, q := range []string{"limit=0", "limit=50001", "limit=x", "overdue=-1h", "only_overdue=maybe"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, code)
		}
	}
}
