package capacity

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
)

// Settings is the table of the suite's settings, reading into co; the
// defaults are the search's own (Options.withDefaults). paths and
// placement are checked here and read by capacityPaths, which sees both.
func Settings(co *Options) suite.Settings {
	d := Options{}.withDefaults()
	checkPaths := func(v string) error {
		for _, x := range suite.SplitList(v) {
			if _, ok := pathNames[x]; !ok {
				return fmt.Errorf("path %q: want same-node, cross-node or node-node", x)
			}
		}
		return nil
	}
	rate := func(p *uint64) func(string) error {
		return func(v string) (err error) {
			if *p, err = suite.ParseRate(v); err == nil && *p == 0 {
				err = fmt.Errorf("rate 0: give a rate above 0")
			}
			return err
		}
	}
	positive := func(p *float64, refusal string) func(string) error {
		return func(v string) (err error) {
			if *p, err = strconv.ParseFloat(v, 64); err == nil && *p <= 0 {
				err = fmt.Errorf("%s", refusal)
			}
			return err
		}
	}
	return suite.Settings{
		{Key: suite.Key{Name: "paths", Unit: "list of same-node, cross-node, node-node", Default: "all three", Meaning: "the paths searched"},
			Set: checkPaths},
		{Key: suite.Key{Name: "placement", Unit: "as paths", Default: "as paths", Meaning: "the same as paths, by the name the other QoS suites use"},
			Set: checkPaths},
		{Key: suite.Key{Name: "loss", Unit: "percent", Default: strconv.FormatFloat(d.LossThresholdPct, 'g', -1, 64), Meaning: "receiver loss a rate must stay below"},
			Set: positive(&co.LossThresholdPct, "want a loss above 0 %")},
		{Key: suite.Key{Name: "start", Unit: "bit/s", Default: suite.KeyRate(d.StartBps), Meaning: "the search's first rate (doubled until loss appears)"},
			Set: rate(&co.StartBps)},
		{Key: suite.Key{Name: "min", Unit: "bit/s", Default: suite.KeyRate(d.MinBps), Meaning: "lowest rate tried"},
			Set: rate(&co.MinBps)},
		{Key: suite.Key{Name: "max", Unit: "bit/s", Default: suite.KeyRate(d.MaxBps), Meaning: "highest rate tried"},
			Set: rate(&co.MaxBps)},
		{Key: suite.Key{Name: "precision", Unit: "fraction", Default: strconv.FormatFloat(d.Precision, 'g', -1, 64), Meaning: "bisection stops when the bracket is this narrow, relative"},
			Set: positive(&co.Precision, "precision: want above 0, e.g. 0.05")},
		{Key: suite.Key{Name: "trial-time", Unit: "duration", Default: d.TrialTime.String(), Meaning: "length of each search trial (the re-test lasts --time)"},
			Set: func(v string) (err error) { co.TrialTime, err = time.ParseDuration(v); return err }},
		{Key: suite.Key{Name: "size", Unit: "bytes", Default: strconv.Itoa(d.Size), Meaning: "UDP datagram payload"},
			Set: suite.SetInt(&co.Size)},
		{Key: suite.Key{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload; off sends real datagrams (docs/probes.md)"},
			Set: func(v string) (err error) { co.Offload, err = parseOffload(v); return err }},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
