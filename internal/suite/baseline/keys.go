package baseline

import (
	"strconv"

	"github.com/cnperf/cnperf/internal/suite"
)

// Keys are the settings of the baseline and of cni-compare, which
// takes the same ones.
func Keys() []suite.Key {
	d := Defaults()
	return []suite.Key{
		{Name: "udp-rate", Unit: "bit/s (500M, 1G)", Default: suite.KeyRate(d.UDPRateBps), Meaning: "rate of the UDP loss and jitter measurement, below the path's capacity"},
		{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
		{Name: "ping-count", Unit: "count", Default: strconv.Itoa(d.PingCount), Meaning: "ICMP echoes per path and repetition"},
		{Name: "stamp", Unit: "true|false", Default: "false", Meaning: "also measure one-way delay with STAMP (RFC 8762) per path"},
		{Name: "stamp-count", Unit: "count", Default: strconv.Itoa(d.StampCount), Meaning: "STAMP test packets per path and repetition, 10 ms apart"},
		{Name: "service", Unit: "true|false", Default: "where the environment makes Services", Meaning: "the pod-service row: the cross-node pair through a ClusterIP Service (true insists, false leaves it out)"},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Keys() }
