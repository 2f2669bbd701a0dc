package suite

import (
	"fmt"
	"slices"
	"strings"
)

// KnownBackends are the backends the lab builds, in the order tables show them.
var KnownBackends = []string{"host-gw", "vxlan"}

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
		if len(only) > 0 && !slices.Contains(only, b) {
			return nil, fmt.Errorf("backend %q: want one of %s", b, strings.Join(only, ", "))
		}
		seen[b] = true
		out = append(out, b)
	}
	return out, nil
}

// SplitList splits a comma-separated setting into its trimmed items.
func SplitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		out = append(out, strings.TrimSpace(x))
	}
	return out
}
