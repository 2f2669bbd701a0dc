package policing

import (
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key {
	return append([]suite.Key{
		{Name: "rate", Unit: "bit/s (10M)", Default: "10M", Meaning: "the police action's rate on arrival at the pod's host-side veth"},
		{Name: "burst", Unit: "bytes (32Ki)", Default: shaping.FormatBytes(shaping.DefaultBurst), Meaning: "the policer's bucket"},
	}, shaping.FlowKeys()...)
}
