package matrix_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/suite"
	. "github.com/cnperf/cnperf/internal/suite/matrix"
)

// TestDefaultsTable computes docs/matrix.md's defaults by size: each
// row's rounds and cycle length, its window in cycles and rounds, the
// window end to end and as a schedule runs it (schedule.Span: a due
// time missed during a cycle starts when it ends), and holds the table
// to them; at 1,000 nodes the window fits in 24 h.
func TestDefaultsTable(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/matrix.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		nodes    int
		settings string
		time     time.Duration
		repeat   int
		set      map[string]string
		every    time.Duration
	}{
		{10, "plan=all", 5 * time.Second, 3, nil, 0},
		{100, "plan=sample, peers=3", 5 * time.Second, 3, map[string]string{"plan": "sample", "peers": "3"}, 5 * time.Minute},
		{1000, "plan=sample, peers=3, `--repeat 2`", 5 * time.Second, 2, map[string]string{"plan": "sample", "peers": "3"}, 3 * time.Minute},
		{5000, "plan=sample, peers=10, `--time 2s --repeat 1`", 2 * time.Second, 1, map[string]string{"plan": "sample", "peers": "10"}, 2 * time.Minute},
	} {
		o := suite.Options{Time: tc.time, Repeat: tc.repeat, Set: tc.set}
		ts, err := CycleTimes(o, tc.nodes)
		if err != nil {
			t.Fatal(err)
		}
		m, err := OptionsFrom(o)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi, rounds, all := 1<<30, 0, 0, time.Duration(0)
		for i, d := range ts {
			r := 2 * (tc.nodes - 1) // plan=all, an even number of nodes
			if m.Plan == pairplan.PlanSample {
				r = SampleRoundCount(tc.nodes, m.Peers, i)
			}
			lo, hi, rounds, all = min(lo, r), max(hi, r), rounds+r, all+d
		}
		settings, cycle, within := tc.settings, fmt.Sprintf("%d rounds, %s", lo, minutes(ts[0])), "1 cycle"
		if hi > lo {
			shortest, longest := ts[0], ts[0]
			for _, d := range ts {
				shortest, longest = min(shortest, d), max(longest, d)
			}
			cycle = fmt.Sprintf("%d–%d rounds, %.1f–%s", lo, hi, shortest.Minutes(), minutes(longest))
		}
		if tc.every > 0 {
			every := fmt.Sprintf("`--every %s`", strings.TrimSuffix(tc.every.String(), "0s"))
			span := schedule.Span(tc.every, ts)
			settings += ", " + every
			within = fmt.Sprintf("%s cycles (%s rounds): %.1f h; %.1f h at %s", thousands(len(ts)), thousands(rounds), all.Hours(), span.Hours(), every)
			if tc.nodes == 1000 && span > 24*time.Hour {
				t.Errorf("1,000 nodes at the defaults: the window takes %v, want within 24 h", span)
			}
		}
		row := fmt.Sprintf("| %s | %s | %s | %s |", thousands(tc.nodes), settings, cycle, within)
		if !strings.Contains(string(doc), row+"\n") {
			t.Errorf("docs/matrix.md's defaults table lacks the computed row\n%s", row)
		}
	}
}

func minutes(d time.Duration) string { return fmt.Sprintf("%.1f min", d.Minutes()) }

func thousands(n int) string {
	s := fmt.Sprint(n)
	if n >= 1000 {
		s = s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
}
