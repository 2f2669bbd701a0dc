package qos

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Counters are a qdisc's or class's statistics.
type Counters struct {
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Requeues   uint64 `json:"requeues"`
	Backlog    uint64 `json:"backlog_bytes"`
	Qlen       uint64 `json:"qlen"`
}

func counters(s *netlink.ClassStatistics) Counters {
	var c Counters
	if s == nil {
		return c
	}
	if s.Basic != nil {
		c.Bytes, c.Packets = s.Basic.Bytes, uint64(s.Basic.Packets)
	}
	if s.Queue != nil {
		c.Drops, c.Overlimits, c.Requeues = uint64(s.Queue.Drops), uint64(s.Queue.Overlimits), uint64(s.Queue.Requeues)
		c.Backlog, c.Qlen = uint64(s.Queue.Backlog), uint64(s.Queue.Qlen)
	}
	return c
}

// QdiscInfo is one qdisc read back from the kernel.
type QdiscInfo struct {
	Kind   string `json:"kind"`
	Handle string `json:"handle"` // "1:0"; "0:0" for the kernel's default root
	Parent string `json:"parent"` // "root", "ingress" or a class handle
	// Parameters, where the kind has them (zero otherwise).
	RateBps      uint64   `json:"rate_bps,omitempty"`
	BurstBytes   uint32   `json:"burst_bytes,omitempty"`
	LimitBytes   uint32   `json:"limit_bytes,omitempty"`   // tbf, bfifo
	LimitPackets uint32   `json:"limit_packets,omitempty"` // pfifo
	DefaultClass string   `json:"default_class,omitempty"` // htb
	Priomap      []uint8  `json:"priomap,omitempty"`       // pfifo_fast, prio
	Stats        Counters `json:"stats"`
}

// ClassInfo is one class.
type ClassInfo struct {
	Kind    string   `json:"kind"`
	Handle  string   `json:"handle"`
	Parent  string   `json:"parent"`
	RateBps uint64   `json:"rate_bps,omitempty"`
	CeilBps uint64   `json:"ceil_bps,omitempty"`
	Prio    uint32   `json:"prio"`
	Stats   Counters `json:"stats"`
}

// FilterInfo is one filter.
type FilterInfo struct {
	Kind     string   `json:"kind"`
	Parent   string   `json:"parent"`
	Priority uint16   `json:"priority"`
	Protocol string   `json:"protocol"` // ip, ipv6, all or 0xNNNN
	Handle   string   `json:"handle"`
	ClassID  string   `json:"class_id,omitempty"`
	Keys     []string `json:"keys,omitempty"`    // u32: "match 00b80000/00fc0000 at 0"
	Actions  []string `json:"actions,omitempty"` // "mirred egress redirect dev bwp…"
}

// State is what is on one link.
type State struct {
	Link    string       `json:"link"`
	Index   int          `json:"index"`
	Qdiscs  []QdiscInfo  `json:"qdiscs"`
	Classes []ClassInfo  `json:"classes,omitempty"`
	Filters []FilterInfo `json:"filters,omitempty"`
}

// Root returns the root qdisc, if any.
func (s State) Root() (QdiscInfo, bool) {
	for _, q := range s.Qdiscs {
		if q.Parent == "root" {
			return q, true
		}
	}
	return QdiscInfo{}, false
}

// Class returns the class with handle h ("1:10").
func (s State) Class(h string) (ClassInfo, bool) {
	for _, c := range s.Classes {
		if c.Handle == h {
			return c, true
		}
	}
	return ClassInfo{}, false
}

// Config renders the state without counters, one object a line, sorted:
// two states with the same configuration render the same.
func (s State) Config() string {
	var lines []string
	for _, q := range s.Qdiscs {
		l := fmt.Sprintf("qdisc %s %s parent %s", q.Kind, q.Handle, q.Parent)
		if q.RateBps != 0 {
			l += fmt.Sprintf(" rate %d burst %d", q.RateBps, q.BurstBytes)
		}
		if q.LimitBytes != 0 {
			l += fmt.Sprintf(" limit %db", q.LimitBytes)
		}
		if q.LimitPackets != 0 {
			l += fmt.Sprintf(" limit %dp", q.LimitPackets)
		}
		if q.DefaultClass != "" {
			l += " default " + q.DefaultClass
		}
		if q.Priomap != nil {
			l += fmt.Sprintf(" priomap %v", q.Priomap)
		}
		lines = append(lines, l)
	}
	for _, c := range s.Classes {
		lines = append(lines, fmt.Sprintf("class %s %s parent %s rate %d ceil %d prio %d", c.Kind, c.Handle, c.Parent, c.RateBps, c.CeilBps, c.Prio))
	}
	for _, f := range s.Filters {
		// Filter handles are chosen by the kernel; leave them out.
		lines = append(lines, fmt.Sprintf("filter %s parent %s prio %d protocol %s classid %s keys %s actions %s",
			f.Kind, f.Parent, f.Priority, f.Protocol, f.ClassID, strings.Join(f.Keys, ","), strings.Join(f.Actions, ",")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func handleStr(h uint32) string {
	switch h {
	case netlink.HANDLE_ROOT:
		return "root"
	case netlink.HANDLE_INGRESS:
		return "ingress"
	}
	maj, min := netlink.MajorMinor(h)
	return fmt.Sprintf("%x:%x", maj, min)
}

func protoStr(p uint16) string {
	switch p {
	case unix.ETH_P_IP:
		return "ip"
	case unix.ETH_P_IPV6:
		return "ipv6"
	case unix.ETH_P_ALL:
		return "all"
	}
	return fmt.Sprintf("0x%04x", p)
}

// Show reads the qdiscs, classes (with counters) and filters on t's link.
// It reports whatever is there, including qdiscs this package did not
// make; kinds it does not understand appear with their kind and handles.
func Show(t Target) (State, error) {
	c, link, err := openTarget(t)
	if err != nil {
		return State{}, fmt.Errorf("qos show: %w", err)
	}
	defer c.close()
	return show(c, link)
}

func show(c *conn, link netlink.Link) (State, error) {
	st := State{Link: link.Attrs().Name, Index: link.Attrs().Index}
	qs, err := c.h.QdiscList(link)
	if err != nil {
		return st, fmt.Errorf("list qdiscs on %s: %w", st.Link, err)
	}
	fifo, err := c.fifoLimits(st.Index)
	if err != nil {
		return st, err
	}
	ifnames := map[int]string{}
	nameOf := func(idx int) string {
		if n, ok := ifnames[idx]; ok {
			return n
		}
		n := fmt.Sprintf("if%d", idx)
		if l, err := c.h.LinkByIndex(idx); err == nil {
			n = l.Attrs().Name
		}
		ifnames[idx] = n
		return n
	}
	var parents []uint32 // where filters may hang
	for _, q := range qs {
		a := q.Attrs()
		st.Qdiscs = append(st.Qdiscs, QdiscInfoOf(q, fifo))
		if a.Handle != 0 {
			parents = append(parents, a.Handle)
		}
	}
	cls, err := c.h.ClassList(link, 0)
	if err != nil {
		return st, fmt.Errorf("list classes on %s: %w", st.Link, err)
	}
	for _, cl := range cls {
		a := cl.Attrs()
		ci := ClassInfo{Kind: cl.Type(), Handle: handleStr(a.Handle), Parent: handleStr(a.Parent), Stats: counters(a.Statistics)}
		if h, ok := cl.(*netlink.HtbClass); ok {
			ci.RateBps, ci.CeilBps, ci.Prio = h.Rate*8, h.Ceil*8, h.Prio
		}
		st.Classes = append(st.Classes, ci)
	}
	for _, p := range parents {
		fs, err := c.h.FilterList(link, p)
		if err != nil {
			return st, fmt.Errorf("list filters under %s on %s: %w", handleStr(p), st.Link, err)
		}
		for _, f := range fs {
			st.Filters = append(st.Filters, filterInfo(f, nameOf))
		}
	}
	return st, nil
}

// QdiscInfoOf reads one qdisc as netlink lists it: its kind, handles,
// parameters and counters. fifo holds the limits of pfifo and bfifo
// qdiscs by handle, which netlink does not parse; nil leaves them 0. It
// is the one reader of a qdisc's attributes (Show and k8s.InspectLocal).
func QdiscInfoOf(q netlink.Qdisc, fifo map[uint32]uint32) QdiscInfo {
	a := q.Attrs()
	qi := QdiscInfo{Kind: q.Type(), Handle: handleStr(a.Handle), Parent: handleStr(a.Parent),
		Stats: counters((*netlink.ClassStatistics)(a.Statistics))}
	switch q := q.(type) {
	case *netlink.Tbf:
		qi.RateBps = q.Rate * 8
		qi.BurstBytes = netlink.Xmitsize(q.Rate, q.Buffer)
		qi.LimitBytes = q.Limit
	case *netlink.Htb:
		qi.DefaultClass = handleStr(netlink.MakeHandle(uint16(a.Handle>>16), uint16(q.Defcls)))
	case *netlink.PfifoFast:
		qi.Priomap = append([]uint8(nil), q.PriorityMap[:]...)
	case *netlink.Prio:
		qi.Priomap = append([]uint8(nil), q.PriorityMap[:]...)
	case *netlink.GenericQdisc:
		switch q.QdiscType {
		case "pfifo":
			qi.LimitPackets = fifo[a.Handle]
		case "bfifo":
			qi.LimitBytes = fifo[a.Handle]
		}
	}
	return qi
}

func filterInfo(f netlink.Filter, nameOf func(int) string) FilterInfo {
	a := f.Attrs()
	fi := FilterInfo{Kind: f.Type(), Parent: handleStr(a.Parent), Priority: a.Priority, Protocol: protoStr(a.Protocol), Handle: fmt.Sprintf("%x", a.Handle)}
	var actions []netlink.Action
	switch f := f.(type) {
	case *netlink.U32:
		if f.ClassId != 0 {
			fi.ClassID = handleStr(f.ClassId)
		}
		if f.Sel != nil {
			for _, k := range f.Sel.Keys {
				fi.Keys = append(fi.Keys, fmt.Sprintf("match %08x/%08x at %d", k.Val, k.Mask, k.Off))
			}
		}
		actions = f.Actions
		if f.Police != nil {
			fi.Actions = append(fi.Actions, fmt.Sprintf("police rate %d bit/s", uint64(f.Police.Rate)*8))
		}
	case *netlink.MatchAll:
		if f.ClassId != 0 {
			fi.ClassID = handleStr(f.ClassId)
		}
		actions = f.Actions
	case *netlink.Flower:
		if f.ClassId != 0 {
			fi.ClassID = handleStr(f.ClassId)
		}
		actions = f.Actions
	}
	for _, act := range actions {
		switch act := act.(type) {
		case *netlink.MirredAction:
			fi.Actions = append(fi.Actions, fmt.Sprintf("mirred %s dev %s then %s", act.MirredAction, nameOf(act.Ifindex), act.Attrs().Action))
		case *netlink.PoliceAction:
			fi.Actions = append(fi.Actions, fmt.Sprintf("police rate %d bit/s burst %d", uint64(act.Rate)*8, act.Burst))
		default:
			fi.Actions = append(fi.Actions, act.Type())
		}
	}
	return fi
}

// RootCounters reads, in one dump, the counters of the root qdisc of
// every link in the namespace at nsPath ("" for the caller's), by link
// name: the backlog a link's egress holds right now, and its drops so
// far. A link whose root is noqueue (veths, bridges) has none.
func RootCounters(nsPath string) (map[string]Counters, error) {
	c, err := openConn(nsPath)
	if err != nil {
		return nil, fmt.Errorf("qos root counters: %w", err)
	}
	defer c.close()
	links, err := c.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	qs, err := c.h.QdiscList(nil)
	if err != nil {
		return nil, fmt.Errorf("list qdiscs: %w", err)
	}
	out := map[string]Counters{}
	for _, q := range qs {
		a := q.Attrs()
		name, ok := names[a.LinkIndex]
		if a.Parent != netlink.HANDLE_ROOT || !ok {
			continue
		}
		out[name] = counters((*netlink.ClassStatistics)(a.Statistics))
	}
	return out, nil
}
