package baseline_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestBaselineStampLab runs `cnperf lab run baseline --set stamp=true` on
// an idle 2-node lab (one pod per node): every connection's row,
// pod-service's too, carries the STAMP figures (a positive round trip,
// losses of 0-100 %, EF seen by the reflector and on the reply; a round
// trip under 50 ms and no loss are figures, logged), and `cnperf report
// RUN_ID` of the stored run shows them.
func TestBaselineStampLab(t *testing.T) {
	db := filepath.Join(t.TempDir(), "runs.db")
	rows, ids := cnperftest.LabRunIDs(t, "baseline", "--set", "stamp=true", "--time", "1s", "--db", db)
	// One pod per node: pod-pod across nodes, node-node, and pod-service
	// (STAMP through the lab's Service: the reflector's replies come back
	// through the DNAT).
	if len(rows) != 3 || len(ids) != 1 {
		t.Fatalf("%d rows of %d runs, want the 3 connections of a 2-node lab with one pod each, 1 run", len(rows), len(ids))
	}
	for _, r := range rows {
		rtt, okRTT := cnperftest.Num(r, "stamp.rtt_ms.p50")
		fwd, okF := cnperftest.Num(r, "stamp.forward.delay_ms.p50")
		rev, okR := cnperftest.Num(r, "stamp.reverse.delay_ms.p50")
		fl, okFL := cnperftest.Num(r, "stamp.forward.loss_pct")
		rl, okRL := cnperftest.Num(r, "stamp.reverse.loss_pct")
		fd, okFD := cnperftest.Num(r, "stamp.forward.dscp_received")
		rd, okRD := cnperftest.Num(r, "stamp.reverse.dscp_received")
		t.Logf("%v: stamp rtt p50 %.3f ms, one-way %.3f / %.3f ms, loss %v / %v %%, dscp %v / %v, errors %v",
			r["connection"], rtt, fwd, rev, fl, rl, fd, rd, r["errors"])
		if !okRTT || !okF || !okR || !okFL || !okRL || !okFD || !okRD {
			t.Errorf("%v: stamp figures missing: %v", r["connection"], r["stamp"])
			continue
		}
		if rtt <= 0 || fl < 0 || fl > 100 || rl < 0 || rl > 100 {
			t.Errorf("%v: stamp rtt p50 %.3f ms, loss %v / %v %%; want a positive round trip and losses of 0-100 %%", r["connection"], rtt, fl, rl)
		}
		// A lab path is a few veths and bridges: well under 50 ms and
		// nothing lost, on a machine that schedules the reflector in time.
		figure.Check(t, rtt <= 50, "%v: stamp rtt p50 %.3f ms, want under 50 ms", r["connection"], rtt)
		figure.Check(t, fl == 0 && rl == 0, "%v: stamp loss %v / %v %% on an idle lab, want 0", r["connection"], fl, rl)
		if fd != 46 || rd != 46 {
			t.Errorf("%v: dscp %v forward, %v back, want EF (46) both ways", r["connection"], fd, rd)
		}
	}

	// cnperf report RUN_ID, from the server serving the run's database.
	url, _ := cnperftest.ServeDB(t, db)
	for _, c := range []struct{ format, want string }{
		{"text", "STAMP RTT ms"}, {"csv", "stamp.rtt_ms.p50"}, {"json", `"stamp"`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, cnperftest.Binary(t), "report", ids[0], "--server", url, "--token", "user", "--format", c.format).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("cnperf report %s --format %s: %v\n%s", ids[0], c.format, err, out)
		}
		if c.format == "text" {
			t.Logf("cnperf report %s:\n%s", ids[0], out)
		}
		wants := []string{c.want}
		if c.format == "text" {
			// The baseline table's STAMP columns (internal/suite/baseline's
			// table: forward loss, the DSCP the reflector saw).
			wants = append(wants, "FWD LOSS %", "DSCP FWD")
		}
		for _, want := range wants {
			if !strings.Contains(string(out), want) {
				t.Errorf("cnperf report --format %s lacks %q:\n%s", c.format, want, out)
			}
		}
	}
}
