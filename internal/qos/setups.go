package qos

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Handles this package uses.
var (
	rootHandle    = netlink.MakeHandle(1, 0)
	ingressHandle = netlink.MakeHandle(0xffff, 0)
)

// DefaultPriomap is the kernel's fixed pfifo_fast priority map (band per
// skb->priority 0-15, which the kernel derives from the TOS byte).
var DefaultPriomap = [16]uint8{1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}

// CNILatency is the queueing latency the CNI bandwidth plugin allows its
// tbf: limit = rate × 25 ms + burst.
const CNILatency = 25 * time.Millisecond

// CNILimitBytes returns the tbf limit the CNI bandwidth plugin uses for a
// rate in bits/s and a burst in bytes: rate × 25 ms + burst.
func CNILimitBytes(rateBps uint64, burstBytes uint32) uint32 {
	return limitFor(rateBps, CNILatency, burstBytes)
}

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
		if len(kinds) > 0 && !contains(kinds, q.Type()) {
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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

// ---------------------------------------------------------------- pfifo_fast

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

// ---------------------------------------------------------------- HTB priority

// HTB class handles of HTBPriority and Bottleneck.
var (
	htbParent  = netlink.MakeHandle(1, 1)
	htbHigh    = netlink.MakeHandle(1, 0x10)
	htbDefault = netlink.MakeHandle(1, 0x20)
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

func htbClass(idx int, parent, handle uint32, rate, ceil uint64, prio uint32) *netlink.HtbClass {
	// Bursts as tc computes them by default: a millisecond of the rate plus
	// an MTU, so the class does not release big bursts at line rate.
	buf := uint32(rate/8/1000) + 1600
	cbuf := uint32(ceil/8/1000) + 1600
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: idx, Parent: parent, Handle: handle},
		netlink.HtbClassAttrs{Rate: rate, Ceil: ceil, Buffer: buf, Cbuffer: cbuf, Prio: prio})
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

// ---------------------------------------------------------------- TBF

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

func (t TBF) remove(c *conn, link netlink.Link) error {
	return deleteRoot(c, link)
}

// ---------------------------------------------------------------- Bottleneck

// Bottleneck modes.
const (
	BottleneckTBF = "tbf"
	BottleneckHTB = "htb"
)

// Bottleneck is a FIFO bottleneck at Rate: a tbf with a queue of
// QueueBytes, or an htb with one class and a pfifo of QueuePackets.
type Bottleneck struct {
	Rate         uint64 // bits/s
	Mode         string // BottleneckTBF (default) or BottleneckHTB
	QueueBytes   uint32 // tbf queue; 0: 12 ms at Rate, at least 64 KiB
	QueuePackets uint32 // htb leaf pfifo; 0: 1000
}

// Kind implements Setup.
func (Bottleneck) Kind() string { return "fifo-bottleneck" }

func (b Bottleneck) mode() string {
	if b.Mode == "" {
		return BottleneckTBF
	}
	return b.Mode
}

// Validate implements Setup.
func (b Bottleneck) Validate() error {
	if err := validRate("rate", b.Rate); err != nil {
		return err
	}
	switch b.mode() {
	case BottleneckTBF:
		if b.QueuePackets != 0 {
			return invalid("queue", "a tbf bottleneck takes its queue in bytes")
		}
		if b.QueueBytes != 0 && b.QueueBytes < 1500 {
			return invalid("queue", "%d bytes is less than one full-size packet", b.QueueBytes)
		}
		_, err := tbfQdisc(netlink.QdiscAttrs{}, b.Rate, b.burst(), b.queue())
		return err
	case BottleneckHTB:
		if b.QueueBytes != 0 {
			return invalid("queue", "an htb bottleneck takes its queue in packets")
		}
		return nil
	}
	return invalid("mode", "%q (want %q or %q)", b.Mode, BottleneckTBF, BottleneckHTB)
}

func (b Bottleneck) burst() uint32 {
	// A millisecond of tokens, at least 10 full-size packets.
	v := b.Rate / 8 / 1000
	if v < 15000 {
		v = 15000
	}
	return uint32(v)
}

func (b Bottleneck) queue() uint32 {
	if b.QueueBytes != 0 {
		return b.QueueBytes
	}
	v := limitFor(b.Rate, 12*time.Millisecond, 0)
	if v < 64*1024 {
		v = 64 * 1024
	}
	return v
}

// Needs implements Setup.
func (b Bottleneck) Needs() []string {
	if b.mode() == BottleneckHTB {
		return []string{FeatureHTB, FeaturePfifo}
	}
	return []string{FeatureTBF}
}

func (b Bottleneck) apply(c *conn, link netlink.Link) error {
	idx := link.Attrs().Index
	if b.mode() == BottleneckTBF {
		return addTBF(c, idx, b.Rate, b.burst(), b.queue())
	}
	q := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: rootHandle, Parent: netlink.HANDLE_ROOT})
	q.Defcls = 1
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add root htb: %w", err)
	}
	if err := c.h.ClassAdd(htbClass(idx, rootHandle, htbParent, b.Rate, b.Rate, 0)); err != nil {
		return fmt.Errorf("add htb class 1:1: %w", err)
	}
	n := b.QueuePackets
	if n == 0 {
		n = 1000
	}
	return c.addFifo(idx, htbParent, netlink.MakeHandle(0x10, 0), FeaturePfifo, n)
}

func (b Bottleneck) remove(c *conn, link netlink.Link) error {
	return deleteRoot(c, link)
}

// ---------------------------------------------------------------- CNI bandwidth plugin

// BandwidthPlugin is what the CNI bandwidth plugin sets up for a pod, on
// the target link, the host-side veth: an ingress limit (traffic towards
// the pod) is a tbf at the veth's root; an egress limit (traffic from the
// pod) is an ingress qdisc on the veth whose match-all u32 filter redirects
// with mirred to an ifb device, with a tbf at the ifb's root. Both tbfs use
// limit = rate × 25 ms + burst. Rates are bits/s, bursts bytes; a zero rate
// with zero burst means no limit in that direction.
type BandwidthPlugin struct {
	IngressRate  uint64
	IngressBurst uint32
	EgressRate   uint64
	EgressBurst  uint32
	// IfbName names the ifb device; "" derives "bwp" + a hash of the link
	// name, as the plugin does from the container ID.
	IfbName string
}

// Kind implements Setup.
func (BandwidthPlugin) Kind() string { return "bandwidth-plugin" }

// Validate implements Setup.
func (b BandwidthPlugin) Validate() error {
	check := func(dir string, rate uint64, burst uint32) error {
		switch {
		case rate == 0 && burst != 0:
			return invalid(dir+" rate", "rate 0 with a burst of %d bytes: a burst needs a rate", burst)
		case rate != 0 && burst == 0:
			return invalid(dir+" burst", "0 bytes: a rate needs a burst")
		case rate != 0:
			if err := validRate(dir+" rate", rate); err != nil {
				return err
			}
			_, err := tbfQdisc(netlink.QdiscAttrs{}, rate, burst, CNILimitBytes(rate, burst))
			return err
		}
		return nil
	}
	if err := check("ingress", b.IngressRate, b.IngressBurst); err != nil {
		return err
	}
	if err := check("egress", b.EgressRate, b.EgressBurst); err != nil {
		return err
	}
	if b.IngressRate == 0 && b.EgressRate == 0 {
		return invalid("rate", "rate 0 in both directions: nothing to limit")
	}
	if b.IfbName != "" && (len(b.IfbName) > unix.IFNAMSIZ-1 || len(b.IfbName) < 4 || b.IfbName[:3] != "bwp") {
		return invalid("ifb name", "%q: want bwp followed by up to 12 characters", b.IfbName)
	}
	return nil
}

// Needs implements Setup.
func (b BandwidthPlugin) Needs() []string {
	if b.EgressRate == 0 {
		return []string{FeatureTBF}
	}
	return []string{FeatureTBF, FeatureIngress, FeatureU32, FeatureMirred, FeatureIfb}
}

func (b BandwidthPlugin) ifbName(link netlink.Link) string {
	if b.IfbName != "" {
		return b.IfbName
	}
	sum := sha1.Sum([]byte(link.Attrs().Name))
	return "bwp" + hex.EncodeToString(sum[:])[:12]
}

func (b BandwidthPlugin) apply(c *conn, link netlink.Link) error {
	idx := link.Attrs().Index
	if b.IngressRate != 0 {
		if err := deleteRoot(c, link); err != nil {
			return err
		}
		if err := addTBF(c, idx, b.IngressRate, b.IngressBurst, CNILimitBytes(b.IngressRate, b.IngressBurst)); err != nil {
			return fmt.Errorf("ingress limit: %w", err)
		}
	}
	if b.EgressRate == 0 {
		return nil
	}
	name := b.ifbName(link)
	if err := c.h.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, Flags: net.FlagUp, MTU: link.Attrs().MTU}}); err != nil {
		return fmt.Errorf("add ifb %s: %w", name, err)
	}
	ifb, err := c.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find ifb %s: %w", name, err)
	}
	if err := c.h.LinkSetUp(ifb); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	if err := addIngress(c, link); err != nil {
		return err
	}
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
		ClassId:     netlink.MakeHandle(1, 1),
		// Redirect and stop (TC_ACT_STOLEN), as the plugin does with
		// netlink.NewMirredAction; with the zero action (pass) the packet
		// would also go on unshaped and the ifb would only see copies.
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := c.h.FilterAdd(f); err != nil {
		return fmt.Errorf("add u32 mirred filter to %s: %w", name, err)
	}
	if err := addTBF(c, ifb.Attrs().Index, b.EgressRate, b.EgressBurst, CNILimitBytes(b.EgressRate, b.EgressBurst)); err != nil {
		return fmt.Errorf("egress limit on %s: %w", name, err)
	}
	return nil
}

func (b BandwidthPlugin) remove(c *conn, link netlink.Link) error {
	var errs []error
	errs = append(errs, deleteRoot(c, link, FeatureTBF), deleteIngress(c, link))
	name := b.ifbName(link)
	// Only an ifb of that name is ours; never delete another kind of device.
	if ifb, err := c.h.LinkByName(name); err == nil && ifb.Type() == "ifb" {
		if err := c.h.LinkDel(ifb); err != nil {
			errs = append(errs, fmt.Errorf("delete ifb %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------- policing

// Police drops traffic arriving on the link above Rate: an ingress qdisc
// with a match-all u32 filter carrying the police action. Kernels without
// act_police (as this project's lab kernel) make Apply return an
// *UnsupportedError.
type Police struct {
	Rate       uint64 // bits/s
	BurstBytes uint32
}

// Kind implements Setup.
func (Police) Kind() string { return "police" }

// Validate implements Setup.
func (p Police) Validate() error {
	if err := validRate("rate", p.Rate); err != nil {
		return err
	}
	if p.Rate/8 > math.MaxUint32 {
		return invalid("rate", "%d bit/s is above the police action's 32-bit byte rate", p.Rate)
	}
	if p.BurstBytes == 0 {
		return invalid("burst", "0 bytes: give a burst of at least one packet")
	}
	return nil
}

// Needs implements Setup.
func (Police) Needs() []string { return []string{FeatureIngress, FeatureU32, FeaturePolice} }

func (p Police) apply(c *conn, link netlink.Link) error {
	if err := addIngress(c, link); err != nil {
		return err
	}
	pa := netlink.NewPoliceAction()
	pa.Rate = uint32(p.Rate / 8)
	pa.Burst = p.BurstBytes
	pa.Mtu = 64 * 1024
	pa.ExceedAction = netlink.TC_POLICE_SHOT
	pa.NotExceedAction = netlink.TC_POLICE_OK
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
		Actions:     []netlink.Action{pa},
	}
	if err := c.h.FilterAdd(f); err != nil {
		return fmt.Errorf("add u32 police filter: %w", err)
	}
	return nil
}

func (p Police) remove(c *conn, link netlink.Link) error {
	return deleteIngress(c, link)
}
