package policing

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// kernel returns a lab's capabilities on a kernel with or without the
// police action.
func kernel(police bool) suite.Caps {
	c := suitetest.LabCaps()
	if !police {
		c.Have = slices.DeleteFunc(c.Have, func(x suite.Cap) bool { return x == suite.CapPolice })
		c.Unsupported = map[suite.Cap]string{suite.CapPolice: "unsupported: kernel lacks the police action (no such file or directory)"}
	}
	return c
}

// TestPolicingUnsupportedIsOneRow: on a kernel without the police
// action, one row per placement (both by default) says why.
func TestPolicingUnsupportedIsOneRow(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 3}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, kernel(false))
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 2 {
		t.Fatalf("phases %+v, want one per placement", phases)
	}
	var outs []suite.Outcome
	for i, want := range []string{suite.PlacementSameNode, suite.PlacementCrossNode} {
		if len(phases[i].Steps) != 1 || len(phases[i].Changes) != 0 || phases[i].Steps[0].Labels[shaping.LabelPlacement] != want {
			t.Fatalf("phase %d: %+v", i, phases[i])
		}
		st := phases[i].Steps[0]
		if st.Spec.Kind != probe.KindPing || st.Spec.Count == 0 || st.Spec.Timeout == 0 {
			t.Errorf("the stand-in step must be a short bounded ping: %+v", st.Spec)
		}
		outs = append(outs, suite.Outcome{Step: st, Result: &probe.Result{}})
	}
	rows := Suite{}.Rows(outs)
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	b, _ := json.Marshal(rows[1])
	for _, want := range []string{`"unsupported":"unsupported: kernel lacks the police action (no such file or directory)"`, `"supported":0`,
		`"placement":"cross-node"`, `"verdict":"police: not measured: unsupported: kernel lacks the police action`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("row lacks %s: %s", want, b)
		}
	}
	if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, "cross-node (pod n2-p1 policed): police: not measured: unsupported: kernel lacks the police action") {
		t.Errorf("table %q", txt)
	}
}

func TestPolicingSupportedPlansBoundedFlows(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"rate": "20M", "protos": "udp", "placement": "cross-node"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, kernel(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 1 || len(phases[0].Changes) != 1 || phases[0].Changes[0].What != suite.CapPolice || len(phases[0].Steps) != 3 {
		t.Fatalf("phases %+v", phases)
	}
	for _, st := range phases[0].Steps {
		if st.Spec.Duration.D() != 2*time.Second || st.Spec.Timeout == 0 || st.Labels[shaping.LabelDirection] != "police" ||
			st.Labels[shaping.LabelPlacement] != suite.PlacementCrossNode || st.Src.Node == st.Dst.Node {
			t.Errorf("step %+v", st)
		}
	}
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"rate": "0"}, "rate 0"},
		{map[string]string{"burst": "32Ki,64Ki"}, "one burst"},
		{map[string]string{"placement": "same-node,elsewhere"}, `placement "elsewhere"`},
	} {
		_, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: c.set}, kernel(true))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.set, err)
		}
	}
}

// k8sCaps are a cluster's capabilities as far as policing is concerned:
// the CNI's bandwidth limits, no police action (for the reason given, or
// refused when why is "").
func k8sCaps(unsupported string) suite.Caps {
	c := suite.Caps{Have: []suite.Cap{suite.CapPodShaping}, Why: map[suite.Cap]string{suite.CapPolice: "no policing here"}}
	if unsupported != "" {
		c.Unsupported = map[suite.Cap]string{suite.CapPolice: unsupported}
	}
	return c
}

// TestPolicingCNIIngressIsTheThesisCase: with ingress-bandwidth set, the
// flows go into the limited pod, UDP at the limit and then at 100 times it
// (1M against 100M), under the CNI's ingress limit; the police variant
// beside it is a row saying why it did not run.
func TestPolicingCNIIngressIsTheThesisCase(t *testing.T) {
	o := suite.Options{Time: 3 * time.Second, Repeat: 1, Set: map[string]string{"ingress-bandwidth": "1M", "placement": "cross-node"}}
	for _, c := range []struct {
		name string
		caps suite.Caps
		why  string
	}{
		{"kernel without police", k8sCaps("unsupported: kernel lacks the police action (no such file or directory)"), "unsupported: kernel lacks the police action"},
		{"environment without police", k8sCaps(""), "not run: no policing here"},
	} {
		t.Run(c.name, func(t *testing.T) {
			phases, err := Suite{}.Plan(suitetest.LabAgents(), o, c.caps)
			if err != nil {
				t.Fatal(err)
			}
			if len(phases) != 2 || len(phases[0].Changes) != 0 || phases[0].Steps[0].Labels[LabelUnsupported] == "" {
				t.Fatalf("phases %+v", phases)
			}
			ph := phases[1]
			if len(ph.Changes) != 1 || ph.Changes[0].What != suite.CapPodShaping || ph.Changes[0].QoS.IngressRateBps != 1e6 || ph.Changes[0].QoS.EgressRateBps != 0 || !ph.Changes[0].AsMade {
				t.Fatalf("changes %+v", ph.Changes)
			}
			var rates []uint64
			for _, st := range ph.Steps {
				if st.Spec.Kind != "udp" || st.Dst.Name != ph.Changes[0].Member || st.Spec.Timeout == 0 || st.Spec.Duration.D() != 3*time.Second {
					t.Errorf("step %+v", st)
				}
				rates = append(rates, *st.Spec.RateBps)
			}
			if !slices.Equal(rates, []uint64{1e6, 100e6}) {
				t.Errorf("offered %v, want 1M then 100M", rates)
			}
			var outs []suite.Outcome
			for _, ph := range phases {
				for _, st := range ph.Steps {
					outs = append(outs, suite.Outcome{Step: st, Result: &probe.Result{}})
				}
			}
			rows := Suite{}.Rows(outs)
			if len(rows) != 3 || rows[0].Labels[LabelVariant] != VariantPolice || !strings.Contains(rows[0].Labels[LabelUnsupported], c.why) ||
				rows[1].Labels[LabelVariant] != VariantCNIIngress || rows[2].Labels[shaping.LabelLoad] != shaping.LoadFlood {
				t.Errorf("rows %+v", rows)
			}
			if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, c.why) || !strings.Contains(txt, "flood") {
				t.Errorf("table %q", txt)
			}
		})
	}
	// Alone, the police variant needs the police action: the runner
	// refuses it up front where the environment lacks it.
	phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"placement": "cross-node"}}, k8sCaps(""))
	if err != nil || len(phases) != 1 || len(phases[0].Changes) != 1 || phases[0].Changes[0].What != suite.CapPolice {
		t.Errorf("police alone: %+v, %v", phases, err)
	}
}
