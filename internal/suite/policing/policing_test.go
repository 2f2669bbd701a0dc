package policing

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
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

func TestPolicingUnsupportedIsOneRow(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 3}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, kernel(false))
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 1 || len(phases[0].Steps) != 1 || len(phases[0].Changes) != 0 {
		t.Fatalf("phases %+v", phases)
	}
	st := phases[0].Steps[0]
	if st.Spec.Kind != probe.KindPing || st.Spec.Count == 0 || st.Spec.Timeout == 0 {
		t.Errorf("the stand-in step must be a short bounded ping: %+v", st.Spec)
	}
	rows := Suite{}.Rows([]suite.Outcome{{Step: st, Result: &probe.Result{}}})
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	b, _ := json.Marshal(rows[0])
	if !strings.Contains(string(b), `"unsupported":"unsupported: kernel lacks the police action (no such file or directory)"`) || !strings.Contains(string(b), `"supported":0`) {
		t.Errorf("row %s", b)
	}
	var sb strings.Builder
	_ = Suite{}.WriteTable(&sb, rows)
	if !strings.Contains(sb.String(), "unsupported: kernel lacks the police action") {
		t.Errorf("table %q", sb.String())
	}
}

func TestPolicingSupportedPlansBoundedFlows(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"rate": "20M", "protos": "udp"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, kernel(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 1 || len(phases[0].Changes) != 1 || phases[0].Changes[0].What != suite.CapPolice || len(phases[0].Steps) != 3 {
		t.Fatalf("phases %+v", phases)
	}
	for _, st := range phases[0].Steps {
		if st.Spec.Duration.D() != 2*time.Second || st.Spec.Timeout == 0 || st.Labels[shaping.LabelDirection] != "police" {
			t.Errorf("step %+v", st)
		}
	}
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"rate": "0"}, "rate 0"},
		{map[string]string{"burst": "32Ki,64Ki"}, "one burst"},
	} {
		_, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: c.set}, kernel(true))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.set, err)
		}
	}
}
