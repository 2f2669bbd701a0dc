package matrix

import (
	"strconv"

	"github.com/cnperf/cnperf/internal/suite"
)

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key {
	d := Options{}.withDefaults()
	return []suite.Key{
		{Name: "endpoints", Unit: "pods|hosts", Default: d.Endpoints, Meaning: "a pod per node (the pod network) or the host-network agents"},
		{Name: "udp-rate", Unit: "bit/s", Default: suite.KeyRate(d.UDPRateBps), Meaning: "rate of each pair's UDP loss measurement"},
		{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
		{Name: "ping-count", Unit: "count", Default: strconv.Itoa(d.PingCount), Meaning: "ICMP echoes per pair, 10 ms apart"},
		{Name: "outlier-mads", Unit: "number", Default: strconv.FormatFloat(d.OutlierMADs, 'g', -1, 64), Meaning: "a pair is an outlier beyond median ± this many MADs (and 10 %)"},
	}
}
