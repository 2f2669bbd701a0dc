package scenario

import (
	"errors"
	"fmt"
	"strings"
)

// Backends the lab builds, in the order tables show them.
var KnownBackends = []string{"host-gw", "vxlan"}

// CNICompareSuite is the baseline of one network backend, labelled with the
// backend, for the comparison table of the Calico and Flannel studies
// (bitrate, transfer and CPU at sender and receiver per connection and
// backend). A cluster has one backend, so one run measures one; the lab
// runs it once per backend on a fresh lab each (see ParseBackends) and
// joins the rows. It takes the baseline's settings.
type CNICompareSuite struct{}

// Name implements Suite.
func (CNICompareSuite) Name() string { return "cni-compare" }

// Describe implements Suite.
func (CNICompareSuite) Describe() string {
	return "the baseline per network backend, compared side by side (bitrate, transfer, CPU at sender and receiver)"
}

// Plan implements Suite.
func (s CNICompareSuite) Plan(agents []Endpoint, o Options, _ Network) ([]Phase, error) {
	if o.Backend == "" {
		return nil, errors.New("suite cni-compare: the backend under test is not named (give --backends with the cluster's backend)")
	}
	bo, err := baselineOptions(s.Name(), o)
	if err != nil {
		return nil, err
	}
	steps, err := Baseline(agents, bo)
	if err != nil {
		return nil, err
	}
	return []Phase{{Name: s.Name() + " on " + o.Backend, Steps: steps}}, nil
}

// Rows implements Suite.
func (CNICompareSuite) Rows(outcomes []Outcome) []Row { return Rows(outcomes) }

// ParseBackends reads a comma-separated backend list ("host-gw,vxlan"):
// every name must be a label of letters, digits and dashes, none repeated.
// When only is not empty every name must be in it (the lab passes the
// backends it can build).
func ParseBackends(list string, only []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, b := range strings.Split(list, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			return nil, fmt.Errorf("backends %q: an empty name (want e.g. host-gw,vxlan)", list)
		}
		for _, r := range b {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return nil, fmt.Errorf("backend %q: want lowercase letters, digits and dashes", b)
			}
		}
		if seen[b] {
			return nil, fmt.Errorf("backends %q: %s given twice", list, b)
		}
		if len(only) > 0 && !contains(only, b) {
			return nil, fmt.Errorf("backend %q: want one of %s", b, strings.Join(only, ", "))
		}
		seen[b] = true
		out = append(out, b)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
