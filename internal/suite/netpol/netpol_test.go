package netpol_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/netpol"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func caps() suite.Caps {
	c := suitetest.LabCaps()
	c.Have = append(c.Have, suite.CapNetworkPolicy)
	return c
}

// TestRefusedWithoutPolicies: an environment that does not enforce
// NetworkPolicy refuses the suite with its reason.
func TestRefusedWithoutPolicies(t *testing.T) {
	why := "the cluster's CNI, flannel, does not enforce NetworkPolicy"
	c := suite.Caps{Why: map[suite.Cap]string{suite.CapNetworkPolicy: why}}
	_, err := netpol.Suite{}.Plan(suitetest.LabAgents(), suite.DefaultOptions(), c)
	if !errors.Is(err, suite.ErrEnvLacks) || !strings.Contains(err.Error(), why) {
		t.Fatalf("err %v, want a refusal with the reason %q", err, why)
	}
}

// TestPlan: per repetition a phase without policies and one per count
// and variant, each measuring tcp, rr and crr on the cross-node pair, the
// policies selecting its destination (allowing its source) or no pod.
func TestPlan(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat = 2
	phases, err := netpol.Suite{}.Plan(suitetest.LabAgents(), o, caps())
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 2*7 {
		t.Fatalf("%d phases, want 7 per repetition", len(phases))
	}
	for _, ph := range phases[:7] {
		if len(ph.Steps) != 3 {
			t.Errorf("%s: %d steps", ph.Name, len(ph.Steps))
		}
		st := ph.Steps[0]
		if st.Connection != suite.PodPodCrossNode || st.Src.Node == st.Dst.Node {
			t.Errorf("%s: %s %s -> %s, want the cross-node pair", ph.Name, st.Connection, st.Src.Node, st.Dst.Node)
		}
		n := st.Labels[netpol.LabelPolicies]
		if n == "0" {
			if len(ph.Changes) != 0 {
				t.Errorf("%s: changes %v", ph.Name, ph.Changes)
			}
			continue
		}
		if len(ph.Changes) != 1 || ph.Changes[0].What != suite.CapNetworkPolicy || ph.Changes[0].Member != st.Dst.Name {
			t.Fatalf("%s: changes %+v, want policies on %s", ph.Name, ph.Changes, st.Dst.Name)
		}
		ps := ph.Changes[0].Policy
		if err := ps.Check(); err != nil {
			t.Errorf("%s: %v", ph.Name, err)
		}
		pair := st.Labels[netpol.LabelSelect] == netpol.SelectPair
		if pair != (ps.Selecting == ps.Count) || pair != (ps.From == st.Src.Name && ps.Port == 5201) || (!pair && ps.Selecting != 0) {
			t.Errorf("%s: policies %+v", ph.Name, *ps)
		}
	}
}

// TestRowsAgainstNone: each row's figures in percent of the no-policy
// row's.
func TestRowsAgainstNone(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat, o.Set = 1, map[string]string{"counts": "100", "select": "pair"}
	phases, err := netpol.Suite{}.Plan(suitetest.LabAgents(), o, caps())
	if err != nil {
		t.Fatal(err)
	}
	var outs []suite.Outcome
	for _, ph := range phases {
		scale := 1.0
		if ph.Steps[0].Labels[netpol.LabelPolicies] == "100" {
			scale = 0.8
		}
		for _, st := range ph.Steps {
			r := &probe.Result{Kind: st.Spec.Kind, ThroughputBps: &probe.SenderReceiver{Receiver: 1e9 * scale},
				TransactionsPerS: probe.Float(1000 * scale)}
			outs = append(outs, suite.Outcome{Step: st, Result: r})
		}
	}
	rows := netpol.Suite{}.Rows(outs)
	if len(rows) != 2 || rows[0].Labels[netpol.LabelPolicies] != "0" {
		t.Fatalf("rows %+v, want none then 100", rows)
	}
	for _, f := range []string{netpol.FigThroughputVsNone, netpol.FigRRVsNone, netpol.FigCRRVsNone} {
		if v := rows[0].Median[f]; math.Abs(v-100) > 1e-9 {
			t.Errorf("none: %s %v, want 100", f, v)
		}
		if v := rows[1].Median[f]; math.Abs(v-80) > 1e-9 {
			t.Errorf("100 policies: %s %v, want 80", f, v)
		}
	}
}
