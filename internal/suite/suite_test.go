package suite_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/cnicompare"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestOptionsAndSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		o    suite.Options
		want string
	}{
		{"zero time", suite.Options{Repeat: 1}, "time 0s"},
		{"zero repeat", suite.Options{Time: time.Second}, "repeat 0"},
		{"unknown setting", suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"rate": "1G"}}, "unknown setting rate"},
		{"bad udp rate", suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"udp-rate": "fast"}}, "udp-rate"},
		{"bad ping count", suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"ping-count": "x"}}, "ping-count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := baseline.Suite{}.Plan(suitetest.LabAgents(), c.o, suite.Caps{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
	if _, err := (cnicompare.Suite{}).Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1}, suite.Caps{}); err == nil {
		t.Error("cni-compare without a backend accepted")
	}
	ph, err := baseline.Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"udp-rate": "100M"}}, suite.Caps{})
	if err != nil || *ph[0].Steps[1].Spec.RateBps != 100e6 {
		t.Errorf("udp-rate setting not applied: %v", err)
	}
}

func TestParseBackends(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // joined result, or an error fragment
		ok   bool
	}{
		{"host-gw,vxlan", "host-gw vxlan", true},
		{" vxlan ", "vxlan", true},
		{"host-gw,,vxlan", "empty name", false},
		{"vxlan,vxlan", "given twice", false},
		{"VXLAN", "lowercase", false},
		{"ipip", "want one of", false},
	} {
		got, err := suite.ParseBackends(c.in, suite.KnownBackends)
		if c.ok && (err != nil || strings.Join(got, " ") != c.want) {
			t.Errorf("%q: %v %v", c.in, got, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%q: err %v, want %q", c.in, err, c.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	r := builtin.Registry()
	if _, err := r.Get("nope"); err == nil || !strings.Contains(err.Error(), "baseline, capacity, cni-compare") {
		t.Errorf("unknown suite: %v", err)
	}
	if s, err := r.Get("cni-compare"); err != nil || s.Name() != "cni-compare" {
		t.Errorf("get cni-compare: %v %v", s, err)
	}
}

// TestAllowNodeQdiscSetting: every suite takes the environment's
// allow-node-qdisc setting; a value that is not a boolean is refused.
func TestAllowNodeQdiscSetting(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
		err  bool
	}{{"true", true, false}, {"false", false, false}, {"1", true, false}, {"yes please", false, true}} {
		o := suite.Options{Set: map[string]string{suite.SetAllowNodeQdisc: c.v}}
		err := o.CheckSet("s")
		got, gerr := o.AllowNodeQdisc()
		if (err != nil) != c.err || (gerr != nil) != c.err || got != c.want {
			t.Errorf("%q: CheckSet %v, AllowNodeQdisc %v %v", c.v, err, got, gerr)
		}
		if c.err && !strings.Contains(err.Error(), "allow-node-qdisc") {
			t.Errorf("%q: error %v does not name the setting", c.v, err)
		}
	}
	if got, err := (suite.Options{}).AllowNodeQdisc(); got || err != nil {
		t.Errorf("absent: %v %v", got, err)
	}
}
