package qospriority

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Settings is the table of the suite's settings, reading into q; the
// documented defaults are read from the suite's own
// (Options.withDefaults).
func Settings(q *Options) suite.Settings {
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
	addList := func(p *[]string) func(string) error {
		return func(v string) error { *p = append(*p, suite.SplitList(v)...); return nil }
	}
	setRate := func(p *uint64) func(string) error {
		return func(v string) error {
			r, err := suite.ParseRate(v)
			if err == nil && r == 0 {
				err = errors.New("rate 0: give a rate above 0, e.g. 1G")
			}
			*p = r
			return err
		}
	}
	setCount := func(p *int) func(string) error {
		return func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return errors.New("want a whole number of at least 1")
			}
			*p = n
			return nil
		}
	}
	return suite.Settings{
		{Key: suite.Key{Name: "variants", Unit: "list of " + strings.Join(Variants, ", "),
			Default: "a cluster (measured as is): " + strings.Join(DefaultVariants(suite.Caps{AsIs: true}), ",") +
				"; an unencapsulated lab: " + strings.Join(DefaultVariants(suite.Caps{}), ",") +
				"; a VXLAN lab: " + strings.Join(DefaultVariants(suite.Caps{Encap: suite.EncapVXLAN}), ","),
			Meaning: "where the queue is and what it does (see docs/qos.md)"},
			Set: suite.SetList(&q.Variants)},
		{Key: suite.Key{Name: "placement", Unit: "list of same-node, cross-node", Default: "cluster: same-node,cross-node; lab: cross-node",
			Meaning: "where the flows and their bottleneck are: pods on one node, or on two"},
			Set: addList(&q.Placements)},
		{Key: suite.Key{Name: "placements", Unit: "as placement", Default: "as placement", Meaning: "the same as placement (kept for runs written with it)"},
			Set: addList(&q.Placements)},
		{Key: suite.Key{Name: "markings", Unit: "list of none, a TOS byte (0x10) or a DSCP (EF, 46)", Default: strings.Join(marks, ","), Meaning: "marks of the foreground flow and ping, one cell each"},
			Set: func(v string) error {
				for _, x := range strings.Split(v, ",") {
					m, err := ParseMarking(x)
					if err != nil {
						return err
					}
					q.Markings = append(q.Markings, m)
				}
				return nil
			}},
		{Key: suite.Key{Name: "high-dscp", Unit: "list of DSCPs", Default: strings.Join(high, ","), Meaning: "code points the HTB tree's high class takes"},
			Set: func(v string) error {
				q.HighDSCP = []int{}
				for _, x := range strings.Split(v, ",") {
					d, err := parseDSCPStrict(x)
					if err != nil {
						return err
					}
					q.HighDSCP = append(q.HighDSCP, d)
				}
				return nil
			}},
		{Key: suite.Key{Name: "bottleneck-rate", Unit: "bit/s", Default: suite.KeyRate(d.BottleneckRateBps), Meaning: "rate of the bottleneck (the HTB tree or FIFO on the sending pod's interface or node's uplink); below the path's capacity"},
			Set: setRate(&q.BottleneckRateBps)},
		{Key: suite.Key{Name: "background-rate", Unit: "bit/s", Default: "twice bottleneck-rate", Meaning: "rate of the background UDP flood"},
			Set: setRate(&q.BackgroundRateBps)},
		{Key: suite.Key{Name: "queue", Unit: "bytes (1.5M, 64Ki)", Default: "12 ms at bottleneck-rate, at least 64Ki", Meaning: "the bottleneck's queue"},
			Set: func(v string) error {
				b, err := qosspec.ParseQuantity(v)
				if err != nil {
					return err
				}
				if b < 1500 || b > math.MaxUint32 {
					return errors.New("want at least one full-size packet (1500 bytes) and below 4Gi")
				}
				q.QueueBytes = uint32(b)
				return nil
			}},
		{Key: suite.Key{Name: "background", Unit: "udp|tcp", Default: d.BackgroundProto, Meaning: "a paced UDP flood, or one unpaced TCP stream"},
			Set: func(v string) error { q.BackgroundProto = v; return nil }},
		{Key: suite.Key{Name: "background-marking", Unit: "none, a TOS byte (0x10) or a DSCP (EF, 46)", Default: "none",
			Meaning: "mark of the background flows (the QoS study marked them higher than the foreground)"},
			Set: func(v string) (err error) { q.BackgroundMarking, err = ParseMarking(v); return err }},
		{Key: suite.Key{Name: "background-flows", Unit: "count", Default: strconv.Itoa(d.BackgroundFlows),
			Meaning: fmt.Sprintf("background flows from the sending pod: UDP flows sharing background-rate (at most %d beside two foregrounds), or the streams of the TCP background", AgentSlots-2)},
			Set: setCount(&q.BackgroundFlows)},
		{Key: suite.Key{Name: "hist-bin", Unit: "duration (5us)", Default: d.HistBinWidth.String(), Meaning: "bin width of the foreground's one-way latency histogram"},
			Set: func(v string) error {
				d, err := time.ParseDuration(v)
				if err != nil {
					return fmt.Errorf("want a duration such as 5us: %w", err)
				}
				q.HistBinWidth = d
				return nil
			}},
		{Key: suite.Key{Name: "hist-bins", Unit: "count", Default: strconv.Itoa(d.HistBins),
			Meaning: "bins of that histogram (the last holds everything beyond); summed over the repetitions (the QoS study: 5us x 200)"},
			Set: setCount(&q.HistBins)},
		{Key: suite.Key{Name: "fg-pps", Unit: "datagrams/s", Default: strconv.Itoa(d.ForegroundPPS), Meaning: "the marked foreground flow's packet rate"},
			Set: suite.SetInt(&q.ForegroundPPS)},
		{Key: suite.Key{Name: "fg-size", Unit: "bytes", Default: strconv.Itoa(d.ForegroundSize), Meaning: "the foreground flow's datagram payload"},
			Set: suite.SetInt(&q.ForegroundSize)},
		{Key: suite.Key{Name: "ping-interval", Unit: "duration", Default: d.PingInterval.String(), Meaning: "interval of the marked ping beside the flows"},
			Set: func(v string) (err error) { q.PingInterval, err = time.ParseDuration(v); return err }},
		{Key: suite.Key{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload of the flows; off sends real datagrams (docs/probes.md)"},
			Set: func(v string) error {
				if v != probe.OffloadAuto && v != probe.OffloadOff {
					return fmt.Errorf("want %s or %s", probe.OffloadAuto, probe.OffloadOff)
				}
				q.Offload = v
				return nil
			}},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
