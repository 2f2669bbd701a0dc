package qos

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Each Setup has a file of its own: setup_pfifo.go (pfifo_fast, prio),
// setup_htb.go (HTB priority), setup_tbf.go, setup_bottleneck.go,
// setup_bandwidth.go (the CNI bandwidth plugin) and setup_police.go. This
// file holds what several of them share.

// Handles this package uses.
var (
	rootHandle    = netlink.MakeHandle(1, 0)
	ingressHandle = netlink.MakeHandle(0xffff, 0)
)

// limitFor returns a tbf queue limit in bytes: latency's worth of rateBps
// (bits/s) plus the burst, capped at the kernel's 32 bits.
func limitFor(rateBps uint64, latency time.Duration, burstBytes uint32) uint32 {
	v := float64(rateBps/8)*latency.Seconds() + float64(burstBytes)
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// QueueLimit is the size of a leaf FIFO: Bytes (a bfifo) or Packets (a
// pfifo), not both; zero for both means pfifo of 1000 packets.
type QueueLimit struct {
	Bytes   uint32 `json:"bytes,omitempty"`
	Packets uint32 `json:"packets,omitempty"`
}

func (q QueueLimit) validate(field string) error {
	if q.Bytes != 0 && q.Packets != 0 {
		return invalid(field, "give a limit in bytes or in packets, not both")
	}
	if q.Bytes != 0 && q.Bytes < 1500 {
		return invalid(field, "%d bytes is less than one full-size packet", q.Bytes)
	}
	return nil
}

func (q QueueLimit) kind() (string, uint32) {
	switch {
	case q.Bytes != 0:
		return FeatureBfifo, q.Bytes
	case q.Packets != 0:
		return FeaturePfifo, q.Packets
	}
	return FeaturePfifo, 1000
}

func validRate(field string, bps uint64) error {
	if bps == 0 {
		return invalid(field, "rate 0: give a rate in bits/s above 0")
	}
	if bps < 8000 {
		return invalid(field, "rate %d bit/s is below 8 kbit/s", bps)
	}
	if bps/8 > math.MaxUint32*uint64(64) {
		return invalid(field, "rate %d bit/s is too large", bps)
	}
	return nil
}

// deleteRoot deletes link's root qdisc when it is one of kinds (any kind
// when none are given) and not the kernel's default (handle 0).
func deleteRoot(c *conn, link netlink.Link, kinds ...string) error {
	qs, err := c.h.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT || a.Handle == 0 {
			continue
		}
		if len(kinds) > 0 && !slices.Contains(kinds, q.Type()) {
			continue
		}
		if err := c.h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("delete root %s %s: %w", q.Type(), netlink.HandleStr(a.Handle), err)
		}
	}
	return nil
}

// deleteIngress deletes link's ingress qdisc (and with it its filters).
func deleteIngress(c *conn, link netlink.Link) error {
	qs, err := c.h.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_INGRESS && q.Type() == "ingress" {
			if err := c.h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete ingress qdisc: %w", err)
			}
		}
	}
	return nil
}

func addIngress(c *conn, link netlink.Link) error {
	q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}}
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add ingress qdisc: %w", err)
	}
	return nil
}

// tbfQdisc builds a tbf for a rate in bits/s, burst and limit in bytes.
func tbfQdisc(attrs netlink.QdiscAttrs, rateBps uint64, burstBytes, limitBytes uint32) (*netlink.Tbf, error) {
	rateB := rateBps / 8
	if rateB == 0 {
		return nil, invalid("rate", "rate 0")
	}
	buffer := netlink.Xmittime(rateB, burstBytes)
	if buffer == 0 || float64(burstBytes)/float64(rateB) > 4.0 {
		return nil, invalid("burst", "%d bytes at %d bit/s does not fit the kernel's token bucket (over 4 s of tokens)", burstBytes, rateBps)
	}
	return &netlink.Tbf{QdiscAttrs: attrs, Rate: rateB, Buffer: buffer, Limit: limitBytes}, nil
}

// HTB class handles of HTBPriority and Bottleneck.
var (
	htbParent  = netlink.MakeHandle(1, 1)
	htbHigh    = netlink.MakeHandle(1, 0x10)
	htbDefault = netlink.MakeHandle(1, 0x20)
)

func htbClass(idx int, parent, handle uint32, rate, ceil uint64, prio uint32) *netlink.HtbClass {
	// Bursts as tc computes them by default: a millisecond of the rate plus
	// an MTU, so the class does not release big bursts at line rate.
	buf := uint32(rate/8/1000) + 1600
	cbuf := uint32(ceil/8/1000) + 1600
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: idx, Parent: parent, Handle: handle},
		netlink.HtbClassAttrs{Rate: rate, Ceil: ceil, Buffer: buf, Cbuffer: cbuf, Prio: prio})
}

func addTBF(c *conn, idx int, rate uint64, burst, limit uint32) error {
	q, err := tbfQdisc(netlink.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: netlink.HANDLE_ROOT}, rate, burst, limit)
	if err != nil {
		return err
	}
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add root tbf rate %d bit/s burst %d B limit %d B: %w", rate, burst, limit, err)
	}
	return nil
}
