package suite

import (
	"fmt"
	"strconv"
)

// Key is one setting a suite takes as --set KEY=VALUE, documented for
// `cnperf suites`, a suite's --help and shell completion.
type Key struct {
	Name string `json:"name"`
	// Unit says how the value is written ("bit/s", "bytes", "duration",
	// "list of ...", "true|false").
	Unit string `json:"unit"`
	// Default is the value used when the key is not given, as the user
	// would write it ("500M", "none", "twice bottleneck-rate").
	Default string `json:"default"`
	Meaning string `json:"meaning"`
}

// A Keyed suite documents its settings. Every built-in suite is one; a
// test checks that the keys it documents are exactly those it accepts.
type Keyed interface {
	Keys() []Key
}

// KeysOf returns the settings s documents (nil when it documents none).
func KeysOf(s Suite) []Key {
	if k, ok := s.(Keyed); ok {
		return k.Keys()
	}
	return nil
}

// CheckKeys refuses the settings of o that s does not document (other
// than the environment's, EnvSettings), naming them and the keys s takes. It needs no agents or network, so the CLI
// calls it before it builds a lab or creates a run. A suite that
// documents no keys is left to its own Plan.
func CheckKeys(s Suite, o Options) error {
	k, ok := s.(Keyed)
	if !ok {
		return nil
	}
	var known []string
	for _, key := range k.Keys() {
		known = append(known, key.Name)
	}
	if err := o.CheckSet(s.Name(), known...); err != nil {
		return fmt.Errorf("%w; see cnperf suites", err)
	}
	return nil
}

// KeyRate writes a default rate the way --set takes it ("500M", "1G",
// "1.5M"), so a documented default is derived from the suite's own.
func KeyRate(bps uint64) string {
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if float64(bps) >= u.div {
			return strconv.FormatFloat(float64(bps)/u.div, 'g', -1, 64) + u.suffix
		}
	}
	return strconv.FormatUint(bps, 10)
}
