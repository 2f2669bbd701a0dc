package qospriority

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Keys implements suite.Keyed; the defaults are read from the suite's
// own (Options.withDefaults).
func (Suite) Keys() []suite.Key {
	d := Options{}.withDefaults()
	var marks []string
	for _, m := range d.Markings {
		if strings.HasPrefix(m.Name, "TOS") {
			marks = append(marks, fmt.Sprintf("0x%02x", m.TOS)) // as --set takes it
			continue
		}
		marks = append(marks, m.Name)
	}
	var high []string
	for _, c := range d.HighDSCP {
		high = append(high, probe.DSCPName(c))
	}
	return []suite.Key{
		{Name: "variants", Unit: "list of " + strings.Join(Variants, ", "),
			Default: "a cluster (measured as is): " + strings.Join(DefaultVariants(suite.Caps{AsIs: true}), ",") +
				"; an unencapsulated lab: " + strings.Join(DefaultVariants(suite.Caps{}), ",") +
				"; a VXLAN lab: " + strings.Join(DefaultVariants(suite.Caps{Encap: suite.EncapVXLAN}), ","),
			Meaning: "where the queue is and what it does (see docs/qos.md)"},
		{Name: "placement", Unit: "list of same-node, cross-node", Default: "cluster: same-node,cross-node; lab: cross-node",
			Meaning: "where the flows and their bottleneck are: pods on one node, or on two"},
		{Name: "placements", Unit: "as placement", Default: "as placement", Meaning: "the same as placement (kept for runs written with it)"},
		{Name: "markings", Unit: "list of none, a TOS byte (0x10) or a DSCP (EF, 46)", Default: strings.Join(marks, ","), Meaning: "marks of the foreground flow and ping, one cell each"},
		{Name: "high-dscp", Unit: "list of DSCPs", Default: strings.Join(high, ","), Meaning: "code points the HTB tree's high class takes"},
		{Name: "bottleneck-rate", Unit: "bit/s", Default: suite.KeyRate(d.BottleneckRateBps), Meaning: "rate of the bottleneck (the HTB tree or FIFO on the sending pod's interface or node's uplink); below the path's capacity"},
		{Name: "background-rate", Unit: "bit/s", Default: "twice bottleneck-rate", Meaning: "rate of the background UDP flood"},
		{Name: "queue", Unit: "bytes (1.5M, 64Ki)", Default: "12 ms at bottleneck-rate, at least 64Ki", Meaning: "the bottleneck's queue"},
		{Name: "background", Unit: "udp|tcp", Default: d.BackgroundProto, Meaning: "a paced UDP flood, or one unpaced TCP stream"},
		{Name: "background-marking", Unit: "none, a TOS byte (0x10) or a DSCP (EF, 46)", Default: "none",
			Meaning: "mark of the background flows (the QoS study marked them higher than the foreground)"},
		{Name: "background-flows", Unit: "count", Default: strconv.Itoa(d.BackgroundFlows),
			Meaning: fmt.Sprintf("background flows from the sending pod: UDP flows sharing background-rate (at most %d beside two foregrounds), or the streams of the TCP background", AgentSlots-2)},
		{Name: "hist-bin", Unit: "duration (5us)", Default: d.HistBinWidth.String(), Meaning: "bin width of the foreground's one-way latency histogram"},
		{Name: "hist-bins", Unit: "count", Default: strconv.Itoa(d.HistBins),
			Meaning: "bins of that histogram (the last holds everything beyond); summed over the repetitions (the QoS study: 5us x 200)"},
		{Name: "fg-pps", Unit: "datagrams/s", Default: strconv.Itoa(d.ForegroundPPS), Meaning: "the marked foreground flow's packet rate"},
		{Name: "fg-size", Unit: "bytes", Default: strconv.Itoa(d.ForegroundSize), Meaning: "the foreground flow's datagram payload"},
		{Name: "ping-interval", Unit: "duration", Default: d.PingInterval.String(), Meaning: "interval of the marked ping beside the flows"},
		{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload of the flows; off sends real datagrams (docs/probes.md)"},
	}
}
