package qos

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// DefaultPriomap is the kernel's fixed pfifo_fast priority map (band per
// skb->priority 0-15, which the kernel derives from the TOS byte).
var DefaultPriomap = [16]uint8{1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}

// PfifoFast puts pfifo_fast at the root: three bands chosen from the
// packet's priority, which the kernel derives from the TOS byte. Its
// priomap is fixed in the kernel; a different Priomap needs the prio
// qdisc, which is used (and detected) when Priomap differs from the
// default.
type PfifoFast struct {
	Priomap *[16]uint8 // nil: DefaultPriomap
}

// Kind implements Setup.
func (PfifoFast) Kind() string { return "pfifo_fast" }

func (p PfifoFast) custom() bool { return p.Priomap != nil && *p.Priomap != DefaultPriomap }

// Validate implements Setup.
func (p PfifoFast) Validate() error {
	if p.Priomap != nil {
		for i, b := range p.Priomap {
			if b > 2 {
				return invalid("priomap", "entry %d is band %d; pfifo_fast has bands 0-2", i, b)
			}
		}
	}
	return nil
}

// Needs implements Setup.
func (p PfifoFast) Needs() []string {
	if p.custom() {
		return []string{FeaturePrio}
	}
	return []string{FeaturePfifoFast}
}

func (p PfifoFast) apply(c *conn, link netlink.Link) error {
	attrs := netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: rootHandle, Parent: netlink.HANDLE_ROOT}
	var q netlink.Qdisc = &netlink.PfifoFast{QdiscAttrs: attrs}
	if p.custom() {
		q = &netlink.Prio{QdiscAttrs: attrs, Bands: 3, PriorityMap: *p.Priomap}
	}
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add root %s: %w", q.Type(), err)
	}
	return nil
}

func (p PfifoFast) remove(c *conn, link netlink.Link) error {
	return deleteRoot(c, link)
}
