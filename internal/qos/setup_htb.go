package qos

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// HTBPriority is an HTB tree at the root: a parent class at Rate (the
// bottleneck), a high-priority leaf (prio 0) for the HighDSCP values matched
// by u32 on the IPv4 TOS byte and the IPv6 traffic class (mask 0xfc), and a
// default leaf (prio 1, htb default) for the rest. Both leaves may borrow
// up to Rate.
type HTBPriority struct {
	Rate     uint64     // bits/s of the bottleneck
	HighRate uint64     // guaranteed bits/s of the high class; 0: Rate/2
	HighDSCP []int      // DSCP values (0-63) of the high class
	Leaf     QueueLimit // each leaf's FIFO
}

// Kind implements Setup.
func (HTBPriority) Kind() string { return "htb-priority" }

// Validate implements Setup.
func (p HTBPriority) Validate() error {
	if err := validRate("rate", p.Rate); err != nil {
		return err
	}
	if p.HighRate != 0 {
		if err := validRate("high rate", p.HighRate); err != nil {
			return err
		}
		if p.HighRate >= p.Rate {
			return invalid("high rate", "%d bit/s must be below the parent rate %d bit/s", p.HighRate, p.Rate)
		}
	}
	if len(p.HighDSCP) == 0 {
		return invalid("dscp", "no DSCP value for the high-priority class")
	}
	if err := validDSCP(p.HighDSCP); err != nil {
		return err
	}
	return p.Leaf.validate("leaf queue")
}

func validDSCP(ds []int) error {
	seen := map[int]bool{}
	for _, d := range ds {
		if d < 0 || d > 63 {
			return invalid("dscp", "%d is outside 0-63", d)
		}
		if seen[d] {
			return invalid("dscp", "%d given twice", d)
		}
		seen[d] = true
	}
	return nil
}

// Needs implements Setup.
func (p HTBPriority) Needs() []string {
	k, _ := p.Leaf.kind()
	return []string{FeatureHTB, k, FeatureU32}
}

func (p HTBPriority) highRate() uint64 {
	if p.HighRate != 0 {
		return p.HighRate
	}
	return p.Rate / 2
}

func (p HTBPriority) apply(c *conn, link netlink.Link) error {
	idx := link.Attrs().Index
	q := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: netlink.HANDLE_ROOT})
	q.Defcls = 0x20
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add root htb: %w", err)
	}
	hi := p.highRate()
	classes := []*netlink.HtbClass{
		htbClass(idx, rootHandle, htbParent, p.Rate, p.Rate, 0),
		htbClass(idx, htbParent, htbHigh, hi, p.Rate, 0),
		htbClass(idx, htbParent, htbDefault, p.Rate-hi, p.Rate, 1),
	}
	for _, cl := range classes {
		if err := c.h.ClassAdd(cl); err != nil {
			return fmt.Errorf("add htb class %s: %w", netlink.HandleStr(cl.Handle), err)
		}
	}
	kind, limit := p.Leaf.kind()
	for _, leaf := range []uint32{htbHigh, htbDefault} {
		_, minor := netlink.MajorMinor(leaf)
		if err := c.addFifo(idx, leaf, netlink.MakeHandle(minor, 0), kind, limit); err != nil {
			return fmt.Errorf("leaf of %s: %w", netlink.HandleStr(leaf), err)
		}
	}
	for _, d := range p.HighDSCP {
		for _, f := range dscpFilters(idx, rootHandle, d, htbHigh) {
			if err := c.h.FilterAdd(f); err != nil {
				return fmt.Errorf("add u32 filter for DSCP %d: %w", d, err)
			}
		}
	}
	return nil
}

// dscpFilters returns u32 filters sending DSCP d (IPv4 TOS byte and IPv6
// traffic class, mask 0xfc) to classID.
func dscpFilters(idx int, parent uint32, d int, classID uint32) []*netlink.U32 {
	tos := uint32(d) << 2
	return []*netlink.U32{
		{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Priority: 1, Protocol: unix.ETH_P_IP},
			ClassId:     classID,
			// TOS is the second byte of the first IPv4 header word.
			Sel: &netlink.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []netlink.TcU32Key{{Mask: 0x00fc0000, Val: tos << 16, Off: 0}}},
		},
		{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Priority: 2, Protocol: unix.ETH_P_IPV6},
			ClassId:     classID,
			// The traffic class sits in bits 20-27 of the first IPv6 word.
			Sel: &netlink.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []netlink.TcU32Key{{Mask: 0x0fc00000, Val: tos << 20, Off: 0}}},
		},
	}
}

func (p HTBPriority) remove(c *conn, link netlink.Link) error {
	return deleteRoot(c, link)
}
