package baseline

import (
	"strconv"

	"github.com/cnperf/cnperf/internal/suite"
)

// Settings is the table of the baseline's settings (and cni-compare's,
// which takes the same ones), reading into bo; the documented defaults
// are those of Defaults.
func Settings(bo *Options) suite.Settings {
	d := Defaults()
	return suite.Settings{
		{Key: suite.Key{Name: "udp-rate", Unit: "bit/s (500M, 1G)", Default: suite.KeyRate(d.UDPRateBps), Meaning: "rate of the UDP loss and jitter measurement, below the path's capacity"},
			Set: suite.SetRate(&bo.UDPRateBps)},
		{Key: suite.Key{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
			Set: suite.SetInt(&bo.UDPSize)},
		{Key: suite.Key{Name: "ping-count", Unit: "count", Default: strconv.Itoa(d.PingCount), Meaning: "ICMP echoes per path and repetition"},
			Set: suite.SetInt(&bo.PingCount)},
		{Key: suite.Key{Name: "stamp", Unit: "true|false", Default: "false", Meaning: "also measure one-way delay with STAMP (RFC 8762) per path"},
			Set: suite.SetBool(&bo.Stamp)},
		{Key: suite.Key{Name: "stamp-count", Unit: "count", Default: strconv.Itoa(d.StampCount), Meaning: "STAMP test packets per path and repetition, 10 ms apart"},
			Set: suite.SetInt(&bo.StampCount)},
		{Key: suite.Key{Name: "service", Unit: "true|false", Default: "where the environment makes Services", Meaning: "the pod-service row: the cross-node pair through a ClusterIP Service (true insists, false leaves it out)"},
			Set: func(v string) error { bo.serviceAsked = true; return suite.SetBool(&bo.Service)(v) }},
	}
}

// Keys are the settings of the baseline and of cni-compare.
func Keys() []suite.Key { return Settings(&Options{}).Keys() }

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Keys() }
