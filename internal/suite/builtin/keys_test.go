package builtin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestKeysDocumentWhatSuitesTake checks, for every built-in suite, that
// each documented setting (cnperf suites, --help, completion: one table
// per suite) has a unit, a default and a meaning and is taken by Plan and
// CheckKeys, and that a key outside the table is refused by both.
func TestKeysDocumentWhatSuitesTake(t *testing.T) {
	reg := Registry()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			s, _ := reg.Get(name)
			keys := suite.KeysOf(s)
			if len(keys) == 0 {
				t.Fatalf("suite %s documents no settings (implement suite.Keyed)", name)
			}
			seen := map[string]bool{}
			for _, k := range keys {
				if k.Name == "" || k.Unit == "" || k.Default == "" || k.Meaning == "" {
					t.Errorf("key %+v: name, unit, default and meaning must all be given", k)
				}
				if seen[k.Name] {
					t.Errorf("key %s documented twice", k.Name)
				}
				seen[k.Name] = true
				o := suite.DefaultOptions()
				o.Backend = "host-gw"
				o.Set = map[string]string{k.Name: k.Default}
				if _, err := s.Plan(nil, o, suite.Caps{}); err != nil && strings.Contains(err.Error(), "unknown setting") {
					t.Errorf("Plan refused the documented key %s: %v", k.Name, err)
				}
				if err := suite.CheckKeys(s, o); err != nil {
					t.Errorf("CheckKeys refused the documented key %s: %v", k.Name, err)
				}
			}
			o := suite.DefaultOptions()
			o.Backend = "host-gw"
			o.Set = map[string]string{"no-such-key": "1"}
			if _, err := s.Plan(nil, o, suite.Caps{}); err == nil || !strings.Contains(err.Error(), "unknown setting no-such-key") {
				t.Errorf("Plan with an unknown setting: %v", err)
			}
			if err := suite.CheckKeys(s, o); err == nil || !strings.Contains(err.Error(), "unknown setting no-such-key") {
				t.Errorf("CheckKeys: %v", err)
			}
			// The environment's settings are every suite's.
			o.Set = map[string]string{suite.SetAllowNodeQdisc: "true"}
			if err := suite.CheckKeys(s, o); err != nil {
				t.Errorf("CheckKeys refused the environment's %s: %v", suite.SetAllowNodeQdisc, err)
			}
		})
	}
}

// TestOneRateGrammar: every rate setting of every suite reads the same
// spellings (a refusal names the value it refuses): iperf3's ("10M", "10m", "10k", "1.5G") and the Kubernetes
// quantities runs were stored with ("10Mi", "1e7").
func TestOneRateGrammar(t *testing.T) {
	reg := Registry()
	n := 0
	for _, name := range reg.Names() {
		s, _ := reg.Get(name)
		for _, k := range suite.KeysOf(s) {
			if !strings.HasPrefix(k.Unit, "bit/s") {
				continue
			}
			n++
			for _, v := range []string{"10M", "10m", "10000k", "10Mi", "1e7", "0.01G"} {
				o := suite.DefaultOptions()
				o.Backend = "host-gw"
				o.Set = map[string]string{k.Name: v}
				var err error
				if c, ok := s.(suite.OptionsChecker); ok {
					err = c.CheckOptions(o)
				} else {
					_, err = s.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
				}
				// A refusal of the spelling names the value; a rate out
				// of the suite's range (capacity's min <= start <= max)
				// is another matter.
				if err != nil && strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
					t.Errorf("%s --set %s=%s: %v", name, k.Name, v, err)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("%d rate settings found, want at least 10", n)
	}
}

// TestOnlyCNICompareComparesBackends: the lab builds one network per
// backend for the suite that says so, whatever its name.
func TestOnlyCNICompareComparesBackends(t *testing.T) {
	reg := Registry()
	for _, name := range reg.Names() {
		s, _ := reg.Get(name)
		if got := suite.ComparesBackends(s); got != (name == "cni-compare") {
			t.Errorf("%s: ComparesBackends %v", name, got)
		}
	}
}
