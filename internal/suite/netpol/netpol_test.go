package netpol_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/connect"
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
	if len(phases) != 2*11 {
		t.Fatalf("%d phases, want 11 per repetition", len(phases))
	}
	for _, ph := range phases[8:11] {
		if len(ph.Steps) != 1 || ph.Steps[0].Spec.Kind != probe.KindConnect || len(ph.Changes) != 2 {
			t.Fatalf("enforcement phase %+v: want a connect sampler, a deny and an allow", ph)
		}
		deny, allow, run := ph.Changes[0], ph.Changes[1], ph.Steps[0].Spec.Duration.D()
		if !deny.Policy.Deny || deny.Policy.From != ph.Steps[0].Src.Name || deny.Policy.Port != 5201 ||
			allow.Policy.Selecting != 1 || allow.Policy.From != ph.Steps[0].Src.Name ||
			deny.After <= 0 || allow.After <= deny.After || run <= allow.After {
			t.Errorf("enforcement phase: deny %+v after %v, allow %+v after %v, sampler for %v: want the deny, then the allow of the source, while it runs",
				*deny.Policy, deny.After, *allow.Policy, allow.After, run)
		}
	}
	deny := phases[1]
	if len(deny.Changes) != 2 || deny.Changes[0].After != 0 || deny.Changes[1].After <= 0 || !deny.Changes[1].Policy.Deny ||
		len(deny.Steps) != 2 || deny.Steps[0].Measure != netpol.MeasureHeld || deny.Steps[1].Measure != netpol.MeasureNew {
		t.Fatalf("deny phase %+v: want a held rr and a later crr, a policy first and a deny made mid-run", deny)
	}
	// Both sets name the pair, so the environment prepares it (labels the
	// pods) before the run, not at the deny, and checks it after.
	for _, c := range deny.Changes {
		if c.Policy.From != deny.Steps[0].Src.Name || c.Policy.Port != 5201 || c.Policy.Check() != nil {
			t.Errorf("deny phase set %+v: want it to name the pair", *c.Policy)
		}
	}
	held, fresh := deny.Steps[0].Spec, deny.Steps[1].Spec
	if held.Duration.D() <= fresh.StartDelay.D() || fresh.StartDelay.D() <= deny.Changes[1].After {
		t.Errorf("held for %v, new after %v, deny after %v: the held connection must outlast the deny, the new ones start after it",
			held.Duration.D(), fresh.StartDelay.D(), deny.Changes[1].After)
	}
	for _, ph := range append(phases[:1:1], phases[2:8]...) {
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
	o.Repeat, o.Set = 1, map[string]string{"counts": "100", "select": "pair", "enforce": "0"}
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
	if len(rows) != 3 || rows[0].Labels[netpol.LabelPolicies] != "0" || rows[2].Labels[netpol.LabelPolicies] != netpol.PoliciesDeny {
		t.Fatalf("rows %+v, want none, 100, then the deny", rows)
	}
	if d := rows[2]; d.Labels[netpol.LabelEstablished] != "kept" || d.Labels[netpol.LabelNew] != "allowed" {
		t.Errorf("deny row %v: both steps succeeded, want kept and allowed", d.Labels)
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

// TestDenyRow: a held connection that failed is cut, a new one that
// failed was refused, counted over the repetitions.
func TestDenyRow(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat, o.Set = 2, map[string]string{"counts": "10", "select": "other", "enforce": "0"}
	phases, err := netpol.Suite{}.Plan(suitetest.LabAgents(), o, caps())
	if err != nil {
		t.Fatal(err)
	}
	var outs []suite.Outcome
	for _, ph := range phases {
		for _, st := range ph.Steps {
			out := suite.Outcome{Step: st, Result: &probe.Result{Kind: st.Spec.Kind, TransactionsPerS: probe.Float(1)}}
			switch {
			case st.Measure == netpol.MeasureNew:
				out.Result, out.Err = nil, "connect: i/o timeout"
			case st.Measure == netpol.MeasureHeld && st.Repeat == 1:
				out.Result, out.Err = nil, "no answer within 2s"
			}
			outs = append(outs, out)
		}
	}
	rows := netpol.Suite{}.Rows(outs)
	d := rows[len(rows)-1]
	if d.Labels[netpol.LabelEstablished] != "kept in 1 of 2" || d.Labels[netpol.LabelNew] != "refused" || len(d.Errors) != 1 {
		t.Errorf("deny row %v errors %v: want kept in 1 of 2, refused, the cut one's error", d.Labels, d.Errors)
	}
}

// TestEnforcementRow: each sample's deny latency is from asking for the
// deny to the first connect that failed, its allow latency from asking
// for the allow to the first that succeeded, its removal latency from
// asking to remove the deny to the undo's return; p50 and p99 over the
// samples; a sampler that started after the deny measures none and says
// why.
func TestEnforcementRow(t *testing.T) {
	o := suite.DefaultOptions()
	o.Repeat, o.Set = 1, map[string]string{"counts": "10", "select": "other", "enforce": "4"}
	phases, err := netpol.Suite{}.Plan(suitetest.LabAgents(), o, caps())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	// Per sample: the deny and allow latencies the timeline shows, in
	// 5 ms steps; the last sample's sampler starts after the deny.
	lat := [][2]int{{15, 40}, {5, 20}, {30, 10}, {0, 0}}
	// How long each deny's removal after the run took (the environment's
	// undo returns once the pair connects again); the last says nothing.
	removal := []int{300, 1100, 700, 0}
	var outs []suite.Outcome
	n := 0
	for _, ph := range phases {
		if ph.Steps[0].Measure != netpol.MeasureEnforce {
			continue
		}
		st := ph.Steps[0]
		denyAt, allowAt := ms(5000), ms(8000)
		first := 0
		if n == 3 {
			first = 5100
		}
		var starts []time.Time
		var outcomes []string
		for v := first; v < 12000; v += 5 {
			at := ms(v)
			ok := at.Before(denyAt.Add(time.Duration(lat[n][0])*time.Millisecond)) || !at.Before(allowAt.Add(time.Duration(lat[n][1])*time.Millisecond))
			starts = append(starts, at)
			if ok {
				outcomes = append(outcomes, probe.ConnectOK)
			} else {
				outcomes = append(outcomes, probe.ConnectTimeout)
			}
		}
		made := []suite.ChangeMade{{Change: ph.Changes[0], Asked: denyAt, Made: denyAt.Add(time.Millisecond)},
			{Change: ph.Changes[1], Asked: allowAt, Made: allowAt.Add(time.Millisecond)}}
		if rm := removal[n]; rm > 0 {
			made[0].Undone, made[0].Removed = ms(12100), ms(12100+rm)
			made[1].Undone, made[1].Removed = ms(12050), ms(12060)
		}
		outs = append(outs, suite.Outcome{Step: st, Made: made,
			Result: &probe.Result{Kind: probe.KindConnect, Connects: connect.Timeline(starts, outcomes)}})
		n++
	}
	if n != 4 {
		t.Fatalf("%d enforcement phases, want 4", n)
	}
	rows := netpol.Suite{}.Rows(outs)
	r := rows[len(rows)-1]
	if r.Labels[netpol.LabelPolicies] != netpol.PoliciesEnforce || r.Repetitions != 4 {
		t.Fatalf("row %+v, want the enforcement row over 4 samples", r)
	}
	want := map[string]float64{netpol.FigDenyP50: 15, netpol.FigDenyP99: 30, netpol.FigAllowP50: 20, netpol.FigAllowP99: 40,
		netpol.FigRemovalP50: 700, netpol.FigRemovalP99: 1100}
	for f, v := range want {
		if got, ok := r.Median[f]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (%v), want %v", f, got, ok, v)
		}
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "sample 4") || !strings.Contains(r.Errors[0], "started late") {
		t.Errorf("errors %v, want sample 4's late start", r.Errors)
	}
}
