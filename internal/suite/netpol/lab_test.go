package netpol_test

import (
	"testing"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/suite/netpol"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// TestNetpolLab runs the suite on a lab, whose policy controller makes
// the policies as iptables rules: a row with none and one per count and
// variant, each with its figures and their share of the no-policy row's;
// a deny made mid-run refuses new connections; the runs leave no
// namespace behind (LabRun). The cost itself is the machine's figure.
func TestNetpolLab(t *testing.T) {
	rows := cnperftest.LabRun(t, "netpol", "--time", "1s", "--set", "counts=10,1000", "--set", "enforce=2")
	if len(rows) != 7 {
		t.Fatalf("%d rows, want none and 10 and 1000 policies, each selecting the pair and not, the deny and the enforcement", len(rows))
	}
	// The enforcement row: each sample measured or says why not; the
	// latencies are the machine's.
	enf := rows[6]
	p50, ok := cnperftest.Num(enf, netpol.FigDenyP50)
	if enf[netpol.LabelPolicies] != netpol.PoliciesEnforce || (!ok && enf["errors"] == nil) {
		t.Errorf("enforcement row %v: want latencies or why none were measured", enf)
	}
	ap50, aok := cnperftest.Num(enf, netpol.FigAllowP50)
	figure.Check(t, ok && aok, "enforcement latency: deny p50 %.1f ms, allow p50 %.1f ms (errors %v)", p50, ap50, enf["errors"])
	// The Runner times each deny's removal after its phase.
	if rm, ok := cnperftest.Num(enf, netpol.FigRemovalP50); !ok || rm < 0 {
		t.Errorf("enforcement row %v: removal latency %v (%v), want it timed", enf, rm, ok)
	}
	deny := rows[5]
	if deny[netpol.LabelPolicies] != netpol.PoliciesDeny || deny[netpol.LabelNew] != "refused" {
		t.Errorf("deny row %v: want new connections refused once the deny is made", deny)
	}
	// The lab's controller accepts established flows first, so the held
	// connection should be kept; that it was made before the deny depends
	// on when its agent started it.
	figure.Check(t, deny[netpol.LabelEstablished] == "kept", "established connection through a new deny: %v, want kept", deny[netpol.LabelEstablished])
	for _, r := range rows[:5] {
		for _, f := range []string{netpol.FigThroughput, netpol.FigRR, netpol.FigCRR, netpol.FigThroughputVsNone, netpol.FigRRVsNone, netpol.FigCRRVsNone} {
			if v, ok := cnperftest.Num(r, f); !ok || v <= 0 {
				t.Errorf("%v policies (%v): %s = %v (%v), want a measured figure (errors %v)", r[netpol.LabelPolicies], r[netpol.LabelSelect], f, v, ok, r["errors"])
			}
		}
		tput, _ := cnperftest.Num(r, netpol.FigThroughputVsNone)
		rr, _ := cnperftest.Num(r, netpol.FigRRVsNone)
		crr, _ := cnperftest.Num(r, netpol.FigCRRVsNone)
		t.Logf("%v policies (%v): throughput %.1f %%, rr %.1f %%, crr %.1f %% of none", r[netpol.LabelPolicies], r[netpol.LabelSelect], tput, rr, crr)
	}
}
