package contention

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Settings is the table of the suite's settings, reading into c; the
// defaults are the suite's own (Options.withDefaults).
func Settings(c *Options) suite.Settings {
	d := Options{}.withDefaults()
	placements := func(v string) error {
		c.Placements = suite.SplitList(v)
		for _, p := range c.Placements {
			if p != SameNode && p != CrossNode {
				return fmt.Errorf("placement %q: want %s or %s", p, SameNode, CrossNode)
			}
		}
		return nil
	}
	return suite.Settings{
		{Key: suite.Key{Name: "flows", Unit: "count (2-16)", Default: strconv.Itoa(d.Flows), Meaning: "competing flows, from the sending node's pods in turn"},
			Set: func(v string) (err error) {
				if c.Flows, err = strconv.Atoi(v); err == nil && (c.Flows < 2 || c.Flows > 16) {
					err = errors.New("want 2-16 flows")
				}
				return err
			}},
		{Key: suite.Key{Name: "protos", Unit: "list of udp, tcp", Default: strings.Join(d.Protos, ","), Meaning: "the flows' protocol, one case each"},
			Set: func(v string) error {
				c.Protos = suite.SplitList(v)
				for _, p := range c.Protos {
					if p != "udp" && p != "tcp" {
						return fmt.Errorf("protocol %q: want udp or tcp", p)
					}
				}
				return nil
			}},
		{Key: suite.Key{Name: "rate", Unit: "bit/s, 0 for unpaced", Default: "0: unpaced (UDP offered at 10x bottleneck-rate, 10G on one node)", Meaning: "each flow's rate"},
			Set: suite.SetRate(&c.RateBps)},
		{Key: suite.Key{Name: "bottleneck-rate", Unit: "bit/s, or none", Default: "lab: " + suite.KeyRate(d.BottleneckRateBps) + "; cluster: none (the path itself)",
			Meaning: "the FIFO on the sending node's uplink (cross node); none measures the path as it is"},
			Set: func(v string) (err error) {
				if v == "none" {
					c.NoBottleneck = true
					return nil
				}
				if c.BottleneckRateBps, err = suite.ParseRate(v); err == nil && c.BottleneckRateBps == 0 {
					err = errors.New("rate 0: give a rate above 0, e.g. 1G, or none")
				}
				return err
			}},
		{Key: suite.Key{Name: "queue", Unit: "bytes", Default: "12 ms at bottleneck-rate, at least 64Ki", Meaning: "the bottleneck's queue"},
			Set: func(v string) error {
				b, err := qosspec.ParseQuantity(v)
				if err == nil && (b < 1500 || b > math.MaxUint32) {
					err = errors.New("want at least one full-size packet (1500 bytes) and below 4Gi")
				}
				c.QueueBytes = uint32(b)
				return err
			}},
		{Key: suite.Key{Name: "placement", Unit: "list of same-node, cross-node", Default: "both where the agents allow", Meaning: "flows into a pod on their node, or through the bottleneck to another node"},
			Set: placements},
		{Key: suite.Key{Name: "placements", Unit: "as placement", Default: "as placement", Meaning: "the same as placement (kept for runs written with it)"},
			Set: placements},
		{Key: suite.Key{Name: "udp-size", Unit: "bytes", Default: strconv.Itoa(d.UDPSize), Meaning: "UDP datagram payload"},
			Set: func(v string) (err error) {
				if c.UDPSize, err = strconv.Atoi(v); err == nil && (c.UDPSize < 16 || c.UDPSize > 65000) {
					err = errors.New("want 16-65000 bytes")
				}
				return err
			}},
		{Key: suite.Key{Name: "offload", Unit: "auto|off", Default: d.Offload, Meaning: "UDP segmentation offload; off sends real datagrams (docs/probes.md)"},
			Set: func(v string) error {
				if v != probe.OffloadAuto && v != probe.OffloadOff {
					return fmt.Errorf("want %s or %s", probe.OffloadAuto, probe.OffloadOff)
				}
				c.Offload = v
				return nil
			}},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
