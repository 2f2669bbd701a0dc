package builtin

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/suite"
)

// TestKeysDocumentWhatSuitesTake checks, for every built-in suite, that
// the settings it documents (cnperf suites, --help, completion) are
// exactly those its Plan accepts: an unknown key makes Plan name the keys
// it takes, and those must be the documented ones, each with a unit, a
// default and a meaning.
func TestKeysDocumentWhatSuitesTake(t *testing.T) {
	takes := regexp.MustCompile(`it takes: ([^)]*)\)`)
	reg := Registry()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			s, _ := reg.Get(name)
			keys := suite.KeysOf(s)
			if len(keys) == 0 {
				t.Fatalf("suite %s documents no settings (implement suite.Keyed)", name)
			}
			var documented []string
			for _, k := range keys {
				if k.Name == "" || k.Unit == "" || k.Default == "" || k.Meaning == "" {
					t.Errorf("key %+v: name, unit, default and meaning must all be given", k)
				}
				documented = append(documented, k.Name)
			}
			o := suite.DefaultOptions()
			o.Backend = "host-gw"
			o.Set = map[string]string{"no-such-key": "1"}
			_, err := s.Plan(nil, o, suite.Caps{})
			if err == nil {
				t.Fatal("Plan took an unknown setting")
			}
			m := takes.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("Plan's refusal does not list the keys it takes: %v", err)
			}
			accepted := strings.Split(strings.TrimSuffix(m[1], "; see cnperf suites"), ", ")
			slices.Sort(accepted)
			slices.Sort(documented)
			if !slices.Equal(accepted, documented) {
				t.Errorf("Plan takes %v, Keys documents %v", accepted, documented)
			}
			if err := suite.CheckKeys(s, o); err == nil || !strings.Contains(err.Error(), "unknown setting no-such-key") {
				t.Errorf("CheckKeys: %v", err)
			}
			o.Set = map[string]string{documented[0]: "x"}
			if err := suite.CheckKeys(s, o); err != nil {
				t.Errorf("CheckKeys refused a documented key: %v", err)
			}
			// The environment's settings are every suite's.
			o.Set = map[string]string{suite.SetAllowNodeQdisc: "true"}
			if err := suite.CheckKeys(s, o); err != nil {
				t.Errorf("CheckKeys refused the environment's %s: %v", suite.SetAllowNodeQdisc, err)
			}
		})
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
