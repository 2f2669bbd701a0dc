package responsiveness

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// Options tune the suite.
type Options struct {
	Time   time.Duration // the probes' time, idle and loaded
	Repeat int
	// Paths are the connections measured (suite.ConnectionOrder's names);
	// none: every one the agents and the environment allow.
	Paths []string
	// Streams is the TCP streams each way (default DefaultStreams).
	Streams int
	// Congestion is the streams' congestion control (default cubic, a
	// loss-based sender that fills whatever queue it meets, as most nodes
	// run); CongestionDefault keeps each node's own.
	Congestion string
	// BottleneckBps, when set, puts a FIFO (tbf) at this rate on the
	// sending node's uplink of every path between nodes; QueueBytes is its
	// limit (0: DefaultQueueDelay at the rate).
	BottleneckBps uint64
	QueueBytes    uint32
	// UDPRateBps is the one-way probe's rate (default 1 Mbit/s).
	UDPRateBps uint64
	// WatchInterval is how often the queue watches sample (default 10 ms).
	WatchInterval time.Duration
}

// DefaultStreams is the saturating TCP streams each way, flent RRUL's
// count: fewer loss-based streams each back off so far at a drop that a
// drop-tail FIFO drains well below its limit between drops, and the rise
// no longer measures the queue's full delay (limit over rate).
const DefaultStreams = 4

// CongestionDefault keeps the nodes' own congestion control.
const CongestionDefault = "default"

// DefaultQueueDelay sizes a bottleneck's queue when no queue is given:
// its limit holds this long at its rate.
const DefaultQueueDelay = 20 * time.Millisecond

func defaults() Options {
	return Options{Streams: DefaultStreams, Congestion: "cubic", UDPRateBps: 1e6, WatchInterval: 10 * time.Millisecond}
}

// queueBytes is the bottleneck's limit.
func (c Options) queueBytes() uint32 {
	if c.QueueBytes != 0 {
		return c.QueueBytes
	}
	return uint32(float64(c.BottleneckBps) / 8 * DefaultQueueDelay.Seconds())
}

// congestion is the streams' spec value ("" for the node's own).
func (c Options) congestion() string {
	if c.Congestion == CongestionDefault {
		return ""
	}
	return c.Congestion
}

// OptionsFrom reads the common options and the settings.
func OptionsFrom(o suite.Options) (Options, error) {
	c := defaults()
	if err := o.Validate(); err != nil {
		return c, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	c.Time, c.Repeat = o.Time, o.Repeat
	if err := Settings(&c).Apply(SuiteName, o); err != nil {
		return c, err
	}
	if c.BottleneckBps > 0 {
		if q := c.queueBytes(); q < 1500 {
			return c, fmt.Errorf("suite %s: the bottleneck's queue of %d bytes holds less than one full-size packet (raise bottleneck-queue)", SuiteName, q)
		}
		if err := qosspec.CheckBucket(c.BottleneckBps, 0); err != nil {
			return c, fmt.Errorf("suite %s: bottleneck: %w", SuiteName, err)
		}
	}
	return c, nil
}

// pathNames are the paths as users type them, and their connections.
var pathNames = map[string]string{
	"same-node": suite.PodPodSameNode, "cross-node": suite.PodPodCrossNode,
	"node-node": suite.NodeNode, "pod-service": suite.PodService,
}

// Settings is the table of the suite's settings, reading into c.
func Settings(c *Options) suite.Settings {
	d := defaults()
	return suite.Settings{
		{Key: suite.Key{Name: "paths", Unit: "list of same-node, cross-node, node-node, pod-service", Default: "every path the agents and the environment allow",
			Meaning: "the paths measured"},
			Set: func(v string) error {
				c.Paths = nil
				for _, p := range suite.SplitList(v) {
					conn, ok := pathNames[p]
					if !ok {
						return fmt.Errorf("path %q: want same-node, cross-node, node-node or pod-service", p)
					}
					if slices.Contains(c.Paths, conn) {
						return fmt.Errorf("path %q given twice", p)
					}
					c.Paths = append(c.Paths, conn)
				}
				return nil
			}},
		{Key: suite.Key{Name: "streams", Unit: "count (1-16)", Default: strconv.Itoa(d.Streams), Meaning: "saturating TCP streams each way (flent RRUL's 4 keep a FIFO near its limit)"},
			Set: func(v string) (err error) {
				if c.Streams, err = strconv.Atoi(v); err == nil && (c.Streams < 1 || c.Streams > 16) {
					err = errors.New("want 1-16 streams")
				}
				return err
			}},
		{Key: suite.Key{Name: "congestion", Unit: "a congestion control's name, or default", Default: d.Congestion,
			Meaning: "the streams' congestion control; default keeps the nodes' own"},
			Set: func(v string) error {
				v = strings.TrimSpace(v)
				if v == "" || len(v) > 15 || strings.Trim(v, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
					return errors.New("want a congestion control's name (cubic, reno, bbr) or default")
				}
				c.Congestion = v
				return nil
			}},
		{Key: suite.Key{Name: "bottleneck", Unit: "bit/s, 0 for none", Default: "0: none",
			Meaning: "a FIFO (tbf) at this rate on the sending node's uplink of the paths between nodes"},
			Set: func(v string) (err error) {
				if strings.HasPrefix(v, "0") && strings.Trim(v, "0") == "" || strings.HasPrefix(v, "0:") {
					c.BottleneckBps = 0
					return nil
				}
				c.BottleneckBps, err = suite.ParseRate(v)
				return err
			}},
		{Key: suite.Key{Name: "bottleneck-queue", Unit: "bytes", Default: fmt.Sprintf("%v at the bottleneck's rate", DefaultQueueDelay),
			Meaning: "the bottleneck's queue limit"},
			Set: func(v string) error {
				if strings.HasSuffix(v, "at the bottleneck's rate") {
					c.QueueBytes = 0
					return nil
				}
				b, err := qosspec.ParseQuantity(v)
				if err == nil && (b < 1500 || b > math.MaxUint32) {
					err = errors.New("want at least one full-size packet (1500 bytes) and below 4Gi")
				}
				c.QueueBytes = uint32(b)
				return err
			}},
		{Key: suite.Key{Name: "udp-rate", Unit: "bit/s", Default: suite.KeyRate(d.UDPRateBps), Meaning: "the one-way latency probe's rate (200-byte datagrams)"},
			Set: func(v string) (err error) {
				if c.UDPRateBps, err = suite.ParseRate(v); err == nil && c.UDPRateBps == 0 {
					err = errors.New("rate 0: give a rate above 0, e.g. 1M")
				}
				return err
			}},
		{Key: suite.Key{Name: "watch-interval", Unit: "duration (1ms-1s)", Default: d.WatchInterval.String(), Meaning: "how often the queue watches sample the nodes' qdiscs"},
			Set: func(v string) (err error) {
				if c.WatchInterval, err = time.ParseDuration(v); err == nil && (c.WatchInterval < time.Millisecond || c.WatchInterval > time.Second) {
					err = errors.New("want 1ms-1s")
				}
				return err
			}},
	}
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }
