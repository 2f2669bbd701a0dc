package qos

import (
	"time"

	"github.com/vishvananda/netlink"
)

// TBF shapes the link's egress with a token bucket at the root.
type TBF struct {
	Rate       uint64        // bits/s
	BurstBytes uint32        // bucket size
	LimitBytes uint32        // queue size; 0: from Latency
	Latency    time.Duration // queue as time at Rate; 0 with LimitBytes 0: CNILatency
}

// Kind implements Setup.
func (TBF) Kind() string { return "tbf" }

// Validate implements Setup.
func (t TBF) Validate() error {
	if err := validRate("rate", t.Rate); err != nil {
		return err
	}
	if t.BurstBytes == 0 {
		return invalid("burst", "0 bytes: give a burst of at least one packet")
	}
	if t.LimitBytes != 0 && t.Latency != 0 {
		return invalid("limit", "give a limit in bytes or a latency, not both")
	}
	if t.Latency < 0 {
		return invalid("latency", "%v is negative", t.Latency)
	}
	_, err := tbfQdisc(netlink.QdiscAttrs{}, t.Rate, t.BurstBytes, t.limit())
	return err
}

func (t TBF) limit() uint32 {
	switch {
	case t.LimitBytes != 0:
		return t.LimitBytes
	case t.Latency != 0:
		return limitFor(t.Rate, t.Latency, t.BurstBytes)
	}
	return CNILimitBytes(t.Rate, t.BurstBytes)
}

// Needs implements Setup.
func (TBF) Needs() []string { return []string{FeatureTBF} }

func (t TBF) apply(c *conn, link netlink.Link) error {
	return addTBF(c, link.Attrs().Index, t.Rate, t.BurstBytes, t.limit())
}

func (t TBF) remove(c *conn, link netlink.Link) error {
	return deleteRoot(c, link)
}
