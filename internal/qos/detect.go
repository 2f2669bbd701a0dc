package qos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// Feature names: qdiscs, classifiers, actions and link kinds Detect tries.
const (
	FeaturePrio      = "prio"
	FeatureFqCodel   = "fq_codel"
	FeatureFq        = "fq"
	FeatureSfq       = "sfq"
	FeatureNetem     = "netem"
	FeatureCake      = "cake"
	FeatureHTB       = "htb"
	FeatureTBF       = "tbf"
	FeaturePfifoFast = "pfifo_fast"
	FeaturePfifo     = "pfifo"
	FeatureBfifo     = "bfifo"
	FeatureIngress   = "ingress"
	FeatureClsact    = "clsact"
	FeatureIfb       = "ifb"
	FeaturePolice    = "police"
	FeatureMirred    = "mirred"
	FeatureU32       = "u32"
	FeatureMatchall  = "matchall"
	FeatureFlower    = "flower"
)

// Feature kinds.
const (
	KindQdisc      = "qdisc"
	KindClassifier = "classifier"
	KindAction     = "action"
	KindLink       = "link"
)

var featureKinds = map[string]string{
	FeaturePrio: KindQdisc, FeatureFqCodel: KindQdisc, FeatureFq: KindQdisc, FeatureSfq: KindQdisc,
	FeatureNetem: KindQdisc, FeatureCake: KindQdisc, FeatureHTB: KindQdisc, FeatureTBF: KindQdisc,
	FeaturePfifoFast: KindQdisc, FeaturePfifo: KindQdisc, FeatureBfifo: KindQdisc,
	FeatureIngress: KindQdisc, FeatureClsact: KindQdisc,
	FeatureIfb:    KindLink,
	FeaturePolice: KindAction, FeatureMirred: KindAction,
	FeatureU32: KindClassifier, FeatureMatchall: KindClassifier, FeatureFlower: KindClassifier,
}

// AllFeatures lists every feature Detect knows, sorted.
func AllFeatures() []string {
	out := make([]string, 0, len(featureKinds))
	for f := range featureKinds {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

func featureNoun(f string) string {
	switch featureKinds[f] {
	case KindQdisc:
		return f + " qdisc"
	case KindClassifier:
		return f + " classifier"
	case KindAction:
		return f + " action"
	case KindLink:
		return f + " device"
	}
	return f
}

// Feature is what Detect found out about one feature.
type Feature struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // qdisc, classifier, action, link
	Present bool   `json:"present"`
	Err     string `json:"error,omitempty"` // the kernel's error when absent
}

// Features is the result of Detect.
type Features struct {
	Kernel string    `json:"kernel"` // uname release
	Where  string    `json:"where"`  // "scratch netns" or "scratch devices in <ns>"
	List   []Feature `json:"features"`
}

// Has reports whether name was tried and found present.
func (f Features) Has(name string) bool {
	for _, x := range f.List {
		if x.Name == name {
			return x.Present
		}
	}
	return false
}

// Get returns the entry for name.
func (f Features) Get(name string) (Feature, bool) {
	for _, x := range f.List {
		if x.Name == name {
			return x, true
		}
	}
	return Feature{}, false
}

// Absent lists the features found missing.
func (f Features) Absent() []string {
	var out []string
	for _, x := range f.List {
		if !x.Present {
			out = append(out, x.Name)
		}
	}
	return out
}

// Detect tries each named feature (all of AllFeatures when none are named)
// on scratch devices and records whether the kernel accepted it. It works
// in a fresh temporary namespace; when one cannot be made (no
// CAP_SYS_ADMIN) it makes scratch devices in nsPath ("" is the caller's
// namespace) and deletes them afterwards. An error means detection itself
// could not run, not that a feature is missing.
func Detect(ctx context.Context, nsPath string, names ...string) (Features, error) {
	if len(names) == 0 {
		names = AllFeatures()
	}
	for _, n := range names {
		if _, ok := featureKinds[n]; !ok {
			return Features{}, invalid("feature", "unknown feature %q (known: %v)", n, AllFeatures())
		}
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	out := Features{Kernel: unix.ByteSliceToString(uts.Release[:])}

	c, where, err := scratchConn(nsPath)
	if err != nil {
		return out, err
	}
	defer c.close()
	out.Where = where

	suffix := randomHex(3)
	a, b := "qdA"+suffix, "qdB"+suffix
	if err := c.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		return out, fmt.Errorf("detect: make scratch veth: %w", err)
	}
	defer func() { _ = c.h.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}}) }()
	la, err := c.h.LinkByName(a)
	if err != nil {
		return out, fmt.Errorf("detect: find scratch veth: %w", err)
	}
	lb, err := c.h.LinkByName(b)
	if err != nil {
		return out, fmt.Errorf("detect: find scratch veth peer: %w", err)
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("detect: %w", err)
		}
		ferr := tryFeature(c, n, la, lb, suffix)
		f := Feature{Name: n, Kind: featureKinds[n], Present: ferr == nil}
		if ferr != nil {
			f.Err = ferr.Error()
		}
		out.List = append(out.List, f)
	}
	return out, nil
}

// checkFeatures returns an *UnsupportedError for the first missing need.
func checkFeatures(ctx context.Context, nsPath string, needs []string) error {
	if len(needs) == 0 {
		return nil
	}
	f, err := Detect(ctx, nsPath, needs...)
	if err != nil {
		return err
	}
	for _, n := range needs {
		if x, _ := f.Get(n); !x.Present {
			return &UnsupportedError{Feature: n, Reason: x.Err}
		}
	}
	return nil
}

// scratchConn opens a netlink connection in a fresh namespace, or in
// nsPath when a namespace cannot be made.
func scratchConn(nsPath string) (*conn, string, error) {
	ns, nerr := newAnonNS()
	if nerr == nil {
		c, err := connAt(ns, "scratch netns")
		if err == nil {
			return c, "scratch netns", nil
		}
		nerr = err
	}
	c, err := openConn(nsPath)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("detect: make scratch netns: %w", nerr), err)
	}
	where := nsPath
	if where == "" {
		where = "current netns"
	}
	return c, "scratch devices in " + where, nil
}

// newAnonNS makes an unnamed namespace and returns a handle to it; the
// namespace disappears when the handle and every socket in it are closed.
func newAnonNS() (netns.NsHandle, error) { return nsthread.Create("", nil) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tryFeature adds and deletes one feature on the scratch veth la (peer lb).
func tryFeature(c *conn, name string, la, lb netlink.Link, suffix string) error {
	idx := la.Attrs().Index
	root := netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}
	tryRoot := func(q netlink.Qdisc) error {
		if err := c.h.QdiscAdd(q); err != nil {
			return err
		}
		return c.h.QdiscDel(q)
	}
	switch name {
	case FeaturePrio:
		return tryRoot(netlink.NewPrio(root))
	case FeatureFqCodel:
		return tryRoot(netlink.NewFqCodel(root))
	case FeatureFq:
		return tryRoot(netlink.NewFq(root))
	case FeatureSfq:
		return tryRoot(&netlink.Sfq{QdiscAttrs: root})
	case FeatureNetem:
		return tryRoot(netlink.NewNetem(root, netlink.NetemQdiscAttrs{}))
	case FeatureCake:
		return tryRoot(&netlink.GenericQdisc{QdiscAttrs: root, QdiscType: "cake"})
	case FeatureHTB:
		return tryRoot(netlink.NewHtb(root))
	case FeatureTBF:
		q, err := tbfQdisc(root, 1_000_000, 16*1024, 32*1024)
		if err != nil {
			return err
		}
		return tryRoot(q)
	case FeaturePfifoFast:
		return tryRoot(&netlink.PfifoFast{QdiscAttrs: root})
	case FeaturePfifo, FeatureBfifo:
		if err := c.addFifo(idx, root.Parent, root.Handle, name, 100); err != nil {
			return err
		}
		return c.h.QdiscDel(&netlink.GenericQdisc{QdiscAttrs: root, QdiscType: name})
	case FeatureIngress:
		return tryIngressQdisc(c, idx, func() error { return nil })
	case FeatureClsact:
		return tryRoot(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}})
	case FeatureIfb:
		ifb := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "qdI" + suffix}}
		if err := c.h.LinkAdd(ifb); err != nil {
			return err
		}
		return c.h.LinkDel(ifb)
	case FeatureU32:
		return tryIngressFilter(c, idx, &netlink.U32{})
	case FeatureMatchall:
		return tryIngressFilter(c, idx, &netlink.MatchAll{})
	case FeatureFlower:
		return tryIngressFilter(c, idx, &netlink.Flower{EthType: unix.ETH_P_IP})
	case FeatureMirred:
		return tryIngressFilter(c, idx, &netlink.U32{Actions: []netlink.Action{
			&netlink.MirredAction{MirredAction: netlink.TCA_EGRESS_REDIR, Ifindex: lb.Attrs().Index}}})
	case FeaturePolice:
		p := netlink.NewPoliceAction()
		p.Rate = 125_000
		p.Burst = 16 * 1024
		p.Mtu = 64 * 1024
		p.ExceedAction = netlink.TC_POLICE_SHOT
		return tryIngressFilter(c, idx, &netlink.U32{Actions: []netlink.Action{p}})
	}
	return fmt.Errorf("no test for feature %q", name)
}

// tryIngressQdisc adds an ingress qdisc, runs fn, and deletes it.
func tryIngressQdisc(c *conn, idx int, fn func() error) error {
	q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
	if err := c.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("(needs the ingress qdisc) %w", err)
	}
	ferr := fn()
	if err := c.h.QdiscDel(q); err != nil && ferr == nil {
		return fmt.Errorf("delete ingress qdisc: %w", err)
	}
	return ferr
}

func tryIngressFilter(c *conn, idx int, f netlink.Filter) error {
	a := f.Attrs()
	a.LinkIndex = idx
	a.Parent = netlink.MakeHandle(0xffff, 0)
	a.Priority = 1
	a.Protocol = unix.ETH_P_ALL
	if fl, ok := f.(*netlink.Flower); ok {
		a.Protocol = fl.EthType
	}
	return tryIngressQdisc(c, idx, func() error { return c.h.FilterAdd(f) })
}

// addFifo adds a pfifo (limit in packets) or bfifo (limit in bytes)
// qdisc; the netlink library cannot set their limit.
func (c *conn) addFifo(idx int, parent, handle uint32, kind string, limit uint32) error {
	req := c.request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(idx), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated(kind)))
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, nl.Uint32Attr(limit)))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("add %s limit %d: %w", kind, limit, err)
	}
	return nil
}

// fifoLimits dumps the qdiscs of link idx and returns the limit of each
// pfifo/bfifo by handle.
func (c *conn) fifoLimits(idx int) (map[uint32]uint32, error) {
	req := c.request(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(idx)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("dump qdiscs: %w", err)
	}
	out := map[uint32]uint32{}
	for _, m := range msgs {
		msg := nl.DeserializeTcMsg(m)
		if int(msg.Ifindex) != idx {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[msg.Len():])
		if err != nil {
			return nil, fmt.Errorf("parse qdisc dump: %w", err)
		}
		kind := ""
		var opts []byte
		for _, a := range attrs {
			switch a.Attr.Type {
			case nl.TCA_KIND:
				kind = unix.ByteSliceToString(a.Value)
			case nl.TCA_OPTIONS:
				opts = a.Value
			}
		}
		if (kind == "pfifo" || kind == "bfifo") && len(opts) >= 4 {
			out[msg.Handle] = nl.NativeEndian().Uint32(opts[:4])
		}
	}
	return out, nil
}

// Summary says in one line what the kernel lacks, naming each feature by
// its kind ("kernel 6.18 lacks: cake qdisc, police action"), or that it
// has everything that was tried.
func (f Features) Summary() string {
	var lacks []string
	for _, x := range f.List {
		if !x.Present {
			lacks = append(lacks, featureNoun(x.Name))
		}
	}
	if len(lacks) == 0 {
		return fmt.Sprintf("kernel %s has all %d features tried", f.Kernel, len(f.List))
	}
	return fmt.Sprintf("kernel %s lacks: %s", f.Kernel, strings.Join(lacks, ", "))
}
