package contention

import (
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// Keys implements suite.Keyed; the defaults are the suite's own.
func (Suite) Keys() []suite.Key {
	d := Options{}.withDefaults()
	return []suite.Key{
		{Name: "flows", Unit: "count (2-16)", Default: strconv.Itoa(d.Flows), Meaning: "competing flows, each from its own pod"},
		{Name: "protos", Unit: "list of udp, tcp", Default: strings.Join(d.Protos, ","), Meaning: "the flows' protocol, one case each"},
		{Name: "rate", Unit: "bit/s, 0 for unpaced", Default: "0: unpaced (UDP offered at 10x bottleneck-rate, 10G on one node)", Meaning: "each flow's rate"},
		{Name: "bottleneck-rate", Unit: "bit/s", Default: suite.KeyRate(d.BottleneckRateBps), Meaning: "the FIFO on the sending node's uplink (cross node)"},
		{Name: "queue", Unit: "bytes", Default: "12 ms at bottleneck-rate, at least 64Ki", Meaning: "the bottleneck's queue"},
		{Name: "placement", Unit: "list of same-node, cross-node", Default: "both where the agents allow", Meaning: "flows into a pod on their node, or through the bottleneck to another node"},
		{Name: "placements", Unit: "as placement", Default: "as placement", Meaning: "the same as placement (kept for runs written with it)"},
		{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
		{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload; off sends real datagrams (docs/probes.md)"},
	}
}
