package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

// TestMatrixCoverage: every ordered pair of the known nodes is printed
// with its age; a pair measured too long ago and one never measured are
// overdue, and the command exits 3.
func TestMatrixCoverage(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cnperf.db")
	st, err := store.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, p := range []store.MatrixPair{
		{Src: "n1", Dst: "n2", Measure: "tcp", RunID: "r", MeasuredAt: now.Add(-time.Hour), Figures: `{"throughput_bps.receiver":2.5e9}`},
		{Src: "n1", Dst: "n2", Measure: "rr", RunID: "r", MeasuredAt: now.Add(-50 * time.Minute), Figures: `{"rtt_ms.p50":0.125}`},
		{Src: "n2", Dst: "n1", Measure: "tcp", RunID: "r", MeasuredAt: now.Add(-3 * time.Hour), Figures: `{}`},
	} {
		if err := st.RecordMatrixPair(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpsertHeartbeat(ctx, store.Agent{PodUID: "u3", PodName: "p3", PodIP: "10.0.0.3", NodeName: "n3", ResponderAddr: "10.0.0.3:5201"}, now); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// The database first (a SQLite store serves one process), then a
	// server on it.
	var url string
	for _, tc := range []struct {
		name string
		args func() []string
	}{
		{"db", func() []string { return []string{"--db", "sqlite:" + path} }},
		{"server", func() []string {
			st, err := store.Open(ctx, "sqlite:"+path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			srv, err := server.New(server.Options{Store: st, UserToken: "user-tok", AgentToken: "agent-tok"})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(hs.Close)
			url = hs.URL
			return []string{"--server", hs.URL, "--token", "user-tok"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := Run(ctx, append([]string{"matrix", "coverage", "--overdue", "2h"}, tc.args()...), Streams{Out: &out, Err: &errb})
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != ExitSLOFailed {
				t.Fatalf("err %v, want exit %d for overdue pairs", err, ExitSLOFailed)
			}
			got := out.String()
			for _, want := range []string{"2.50", "0.125", "never", "2 of 6 ordered pairs of 3 nodes measured", "5 overdue"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			// The ages count from the command's clock, which has moved on
			// since the pairs were stored (seconds on a busy machine).
			since := time.Since(now)
			for _, pair := range []struct {
				src, dst string
				age      time.Duration
				overdue  bool
			}{{"n1", "n2", time.Hour, false}, {"n2", "n1", 3 * time.Hour, true}} {
				age, overdue, ok := coverageAge(got, pair.src, pair.dst)
				if !ok || age < pair.age || age > pair.age+since+time.Second || overdue != pair.overdue {
					t.Errorf("%s → %s: age %v overdue %v (found %v), want %v to %v later, overdue %v:\n%s",
						pair.src, pair.dst, age, overdue, ok, pair.age, since+time.Second, pair.overdue, got)
				}
			}
		})
	}
	var out bytes.Buffer
	err = Run(ctx, []string{"matrix", "coverage", "--db", "sqlite:" + path, "--server", url}, Streams{Out: &out, Err: &out})
	if err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("--db and --server: err %v, want one refused", err)
	}
}

// coverageAge reads the AGE column of the pair src → dst in the output of
// matrix coverage, and whether it says OVERDUE.
func coverageAge(out, src, dst string) (age time.Duration, overdue, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != src || f[1] != dst {
			continue
		}
		age, err := time.ParseDuration(f[3])
		if err != nil {
			return 0, false, false
		}
		return age, len(f) > 4 && f[4] == "OVERDUE", true
	}
	return 0, false, false
}

// TestPrintCoverageFollowsPages: the coverage is read a page at a time,
// each asked after the previous page's last sender, until a page has no
// next; every page's pairs are printed and counted, and a page whose next
// does not move on is an error rather than a loop.
func TestPrintCoverageFollowsPages(t *testing.T) {
	now := time.Now()
	old := now.Add(-30 * time.Hour)
	pages := map[string]api.MatrixCoverage{
		"":   {At: now, Nodes: []string{"a", "b", "c"}, Next: "a", Pairs: []api.PairCoverage{{Src: "a", Dst: "b", MeasuredAt: &now}, {Src: "a", Dst: "c", MeasuredAt: &now}}},
		"a":  {At: now, Nodes: []string{"a", "b", "c"}, Next: "b", Pairs: []api.PairCoverage{{Src: "b", Dst: "a", MeasuredAt: &old}, {Src: "b", Dst: "c"}}},
		"b":  {At: now, Nodes: []string{"a", "b", "c"}, Pairs: []api.PairCoverage{{Src: "c", Dst: "a", MeasuredAt: &now}, {Src: "c", Dst: "b", MeasuredAt: &now}}},
		"xx": {At: now, Next: "xx"},
	}
	var asked []string
	page := func(_ context.Context, q api.CoverageQuery) (api.MatrixCoverage, error) {
		asked = append(asked, q.After)
		return pages[q.After], nil
	}
	var out bytes.Buffer
	late, err := printCoverage(context.Background(), &out, page, 24*time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(asked, ",") != ",a,b" || late != 2 {
		t.Errorf("asked after %q, %d late; want pages after \"\", a, b and 2 late", asked, late)
	}
	for _, want := range []string{"c         a ", "never", "5 of 6 ordered pairs of 3 nodes measured", "2 overdue"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	pages[""] = api.MatrixCoverage{At: now, Next: "xx"}
	if _, err := printCoverage(context.Background(), &out, page, time.Hour, false); err == nil || !strings.Contains(err.Error(), "does not move on") {
		t.Errorf("a page whose next repeats: err %v, want it refused", err)
	}
}
