package capacity

import (
	"strconv"

	"github.com/cnperf/cnperf/internal/suite"
)

// Keys implements suite.Keyed; the defaults are the search's own
// (Options.withDefaults).
func (Suite) Keys() []suite.Key {
	d := Options{}.withDefaults()
	return []suite.Key{
		{Name: "paths", Unit: "list of same-node, cross-node, node-node", Default: "all three", Meaning: "the paths searched"},
		{Name: "placement", Unit: "as paths", Default: "as paths", Meaning: "the same as paths, by the name the other QoS suites use"},
		{Name: "loss", Unit: "percent", Default: strconv.FormatFloat(d.LossThresholdPct, 'g', -1, 64), Meaning: "receiver loss a rate must stay below"},
		{Name: "start", Unit: "bit/s", Default: suite.KeyRate(d.StartBps), Meaning: "the search's first rate (doubled until loss appears)"},
		{Name: "min", Unit: "bit/s", Default: suite.KeyRate(d.MinBps), Meaning: "lowest rate tried"},
		{Name: "max", Unit: "bit/s", Default: suite.KeyRate(d.MaxBps), Meaning: "highest rate tried"},
		{Name: "precision", Unit: "fraction", Default: strconv.FormatFloat(d.Precision, 'g', -1, 64), Meaning: "bisection stops when the bracket is this narrow, relative"},
		{Name: "trial-time", Unit: "duration", Default: d.TrialTime.String(), Meaning: "length of each search trial (the re-test lasts --time)"},
		{Name: "size", Unit: "bytes", Default: strconv.Itoa(d.Size), Meaning: "UDP datagram payload"},
		{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload; off sends real datagrams (docs/probes.md)"},
	}
}
