package matrix_test

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestMatrixLab: six lab nodes, n3's underlay link at 100 Mbit/s both
// ways: rows for all 30 ordered pairs (within 2 minutes: a figure), every
// pair of n3 and n3 itself flagged as outliers (no other pair: a figure);
// and, from the
// stored tasks' start and end times, no node was ever in two throughput
// tests at once.
func TestMatrixLab(t *testing.T) {
	db := filepath.Join(t.TempDir(), "runs.db")
	cnperftest.Binary(t) // built before the clock starts
	start := time.Now()
	rows, runIDs := cnperftest.LabRunIDs(t, "matrix", "--nodes", "6", "--time", "1s", "--node-underlay-rate", "n3=100M", "--db", db)
	took := time.Since(start)
	t.Logf("matrix of 6 nodes: %d rows, %d runs in %v", len(rows), len(runIDs), took.Round(time.Second))
	figure.Check(t, took <= 2*time.Minute, "a 6-node matrix took %v, want within 2 minutes", took.Round(time.Second))
	pairs, nodes := 0, map[string]string{}
	for _, r := range rows {
		out, _ := r[matrix.LabelOutlier].(string)
		if n, ok := r[matrix.LabelNode].(string); ok {
			nodes[n] = out
			continue
		}
		pairs++
		src, dst := r[matrix.LabelSrc].(string), r[matrix.LabelDst].(string)
		tput, _ := cnperftest.Num(r, "throughput_bps.receiver")
		// n3's 100 Mbit/s links are a tenth of what any veth pair carries
		// even on a loaded machine: every pair of n3 is flagged. Round
		// trips on a shared host are noisy, and a CPU hog can starve any
		// pair's sender: a pair without n3 flagged for its throughput or
		// loss is a figure, logged.
		involved := src == "n3" || dst == "n3"
		if involved && out == "" {
			t.Errorf("pair %s → %s (%.2f Gbit/s): not flagged, want every pair of n3 flagged", src, dst, tput/1e9)
		}
		if !involved {
			figure.Check(t, !strings.Contains(out, "TCP throughput") && !strings.Contains(out, "UDP loss"),
				"pair %s → %s (%.2f Gbit/s): outlier %q, want no throughput or loss flag without n3", src, dst, tput/1e9, out)
		}
		if out != "" {
			t.Logf("outlier %s → %s: %s", src, dst, out)
		}
		if src == "n3" && !strings.Contains(out, "TCP throughput") {
			t.Errorf("pair %s → %s: outlier reason %q does not name the throughput", src, dst, out)
		}
	}
	if pairs != 30 {
		t.Errorf("%d pair rows, want 30", pairs)
	}
	if nodes["n3"] == "" || len(nodes) != 6 {
		t.Errorf("nodes %v: want six, n3 flagged", nodes)
	}
	_, c := cnperftest.ServeDB(t, db)
	checkNoOverlap(t, c, runIDs, 60)
}

// TestMatrixLabSampleCoverage: eight lab nodes, plan=sample with two
// peers and cycles left at their default: the run covers the window it
// states, so the coverage the server kept (GET /api/v2/matrix/coverage)
// has all 56 ordered pairs measured, with every kind; no node was in two
// throughput tests at once.
func TestMatrixLabSampleCoverage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "runs.db")
	rows, runIDs := cnperftest.LabRunIDs(t, "matrix", "--nodes", "8", "--time", "1s", "--set", "plan=sample", "--set", "peers=2", "--db", db)
	pairs := 0
	for _, r := range rows {
		if _, ok := r[matrix.LabelNode]; !ok {
			pairs++
		}
	}
	if pairs != 56 {
		t.Errorf("%d pair rows, want 56", pairs)
	}
	_, c := cnperftest.ServeDB(t, db)
	cov, err := c.MatrixCoverage(context.Background(), api.CoverageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	measured := 0
	for _, p := range cov.Pairs {
		if p.MeasuredAt == nil || len(p.Measures) != 4 {
			t.Errorf("pair %s → %s: measured at %v, kinds %v; want all four", p.Src, p.Dst, p.MeasuredAt, p.Measures)
			continue
		}
		measured++
	}
	if len(cov.Nodes) != 8 || measured != 56 {
		t.Errorf("coverage of %d nodes, %d of %d pairs measured; want 8 nodes, 56 pairs", len(cov.Nodes), measured, len(cov.Pairs))
	}
	checkNoOverlap(t, c, runIDs, 0)
}

// checkNoOverlap reads the stored runs back through c and checks, per node, that
// its throughput tasks (tcp, udp) never overlapped in time, and that
// there were want of them (0: any number).
func checkNoOverlap(t *testing.T, c *client.Client, runIDs []string, want int) {
	t.Helper()
	ctx := context.Background()
	type span struct {
		from, to time.Time
		what     string
	}
	busy := map[string][]span{}
	n := 0
	for _, id := range runIDs {
		run, err := c.GetRun(ctx, id)
		if err != nil {
			t.Fatalf("stored run %s: %v", id, err)
		}
		p, _, err := suite.OutcomesFromRun(run)
		if err != nil {
			t.Fatal(err)
		}
		tasks := append([]api.TaskV2(nil), run.Tasks...)
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
		for i, task := range tasks {
			step := p.Steps[i]
			if step.Measure != suite.MeasureTCP && step.Measure != suite.MeasureUDP {
				continue
			}
			if task.StartedAt == nil || task.FinishedAt == nil {
				t.Errorf("task %s (%s %s → %s) has no start or end time", task.TaskID, step.Measure, step.Src.Node, step.Dst.Node)
				continue
			}
			n++
			s := span{*task.StartedAt, *task.FinishedAt, step.Measure + " " + step.Src.Node + "→" + step.Dst.Node}
			for _, node := range []string{step.Src.Node, step.Dst.Node} {
				for _, o := range busy[node] {
					if s.from.Before(o.to) && o.from.Before(s.to) {
						t.Errorf("node %s in two throughput tests at once: %s and %s", node, s.what, o.what)
					}
				}
				busy[node] = append(busy[node], s)
			}
		}
	}
	if want > 0 && n != want {
		t.Errorf("%d throughput tasks with times, want %d (tcp and udp per pair)", n, want)
	}
	t.Logf("%d throughput tasks, no node in two at once", n)
}
