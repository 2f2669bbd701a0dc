// Package qos applies and removes traffic-control state (qdiscs, classes,
// filters, the ifb device of the CNI bandwidth plugin) on one link in one
// network namespace, through netlink only; it never runs tc or ip.
//
// Apply makes a link match a Setup and is idempotent: applying the same
// setup twice leaves the same kernel state. Remove takes the setup away and
// leaves the link's default root qdisc. Show reads back whatever is on a
// link, including qdiscs others made (a CNI plugin, the kernel's defaults).
// Detect finds which qdiscs, classifiers and actions the kernel has, on
// scratch devices in a temporary namespace; Apply of a setup that needs a
// missing one returns an *UnsupportedError before touching the link.
//
// Everything here needs CAP_NET_ADMIN in the link's namespace; Detect also
// wants CAP_SYS_ADMIN to make its scratch namespace (without it, it uses
// scratch devices in the target namespace). The calling thread never
// switches namespace: netlink sockets are opened with netlink.NewHandleAt.
package qos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// opTimeout bounds every netlink request (send and receive).
const opTimeout = 5 * time.Second

// Target names one link in one network namespace.
type Target struct {
	// NetNS is a namespace path (/var/run/netns/NAME, /proc/PID/ns/net), a
	// name under /var/run/netns, or "" for the caller's namespace.
	NetNS string
	// Link is the interface name, e.g. "eth0".
	Link string
	// RateBps is the link's rate in bits/s when the caller knows it (the
	// lab's underlay rate, a NIC's speed); 0 asks the driver, ignoring
	// placeholder speeds such as a veth's. Apply rejects a setup whose rate
	// is above it.
	RateBps uint64
}

func (t Target) String() string {
	ns := t.NetNS
	if ns == "" {
		ns = "current netns"
	}
	return fmt.Sprintf("%s in %s", t.Link, ns)
}

// Setup is one desired traffic-control configuration of a link. The types
// in this package implement it: PfifoFast, HTBPriority, TBF, Bottleneck,
// BandwidthPlugin, Police.
type Setup interface {
	// Kind names the setup ("htb-priority", "tbf", ...).
	Kind() string
	// Validate rejects bad parameters with an error naming the problem.
	Validate() error
	// Needs lists the kernel features (Feature* names) the setup uses.
	Needs() []string

	apply(c *conn, link netlink.Link) error
	remove(c *conn, link netlink.Link) error
}

// UnsupportedError says the kernel lacks a feature a setup needs.
type UnsupportedError struct {
	Feature string // a Feature* name, e.g. "police"
	Reason  string // what the kernel said when the feature was tried
}

func (e *UnsupportedError) Error() string {
	msg := "unsupported: kernel lacks the " + featureNoun(e.Feature)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

// ValidationError is bad input to a setup or a target.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrLinkNotFound is returned (wrapped) when the target link does not exist.
var ErrLinkNotFound = errors.New("link not found")

// Apply makes t's link match s: it validates s, checks that the kernel has
// what s needs, removes any earlier configuration of the kind s manages and
// builds s. On failure everything it made is removed again.
func Apply(ctx context.Context, t Target, s Setup) error {
	if s == nil {
		return invalid("setup", "nil")
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("qos %s on %s: %w", s.Kind(), t, err)
	}
	c, link, err := openTarget(t)
	if err != nil {
		return fmt.Errorf("qos %s: %w", s.Kind(), err)
	}
	defer c.close()
	if err := checkLinkRate(c, t, link, s); err != nil {
		return fmt.Errorf("qos %s on %s: %w", s.Kind(), t, err)
	}
	if err := checkFeatures(ctx, t.NetNS, s.Needs()); err != nil {
		return fmt.Errorf("qos %s on %s: %w", s.Kind(), t, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qos %s on %s: %w", s.Kind(), t, err)
	}
	if err := s.remove(c, link); err != nil {
		return fmt.Errorf("qos %s on %s: clear earlier state: %w", s.Kind(), t, err)
	}
	if err := s.apply(c, link); err != nil {
		err = fmt.Errorf("qos %s on %s: %w", s.Kind(), t, err)
		if rerr := s.remove(c, link); rerr != nil {
			err = errors.Join(err, fmt.Errorf("undo: %w", rerr))
		}
		return err
	}
	return nil
}

// Item is one setup on one link, for ApplyAll.
type Item struct {
	Target Target
	Setup  Setup
}

// ApplyAll validates every item, then applies them in order. When one
// fails, the items applied before it are removed again, so a failed call
// leaves no qdisc behind. On success it returns an undo that removes them
// all (in reverse order).
func ApplyAll(ctx context.Context, items []Item) (undo func() error, err error) {
	for i, it := range items {
		if it.Setup == nil {
			return nil, fmt.Errorf("qos item %d on %s: %w", i+1, it.Target, invalid("setup", "nil"))
		}
		if err := it.Setup.Validate(); err != nil {
			return nil, fmt.Errorf("qos %s on %s: %w", it.Setup.Kind(), it.Target, err)
		}
	}
	var done []Item
	undo = func() error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			errs = append(errs, Remove(done[i].Target, done[i].Setup))
		}
		return errors.Join(errs...)
	}
	for _, it := range items {
		if err := Apply(ctx, it.Target, it.Setup); err != nil {
			if uerr := undo(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("remove what was applied: %w", uerr))
			}
			return nil, err
		}
		done = append(done, it)
	}
	return undo, nil
}

// Remove takes s away from t's link: the root qdisc s makes (if the root
// is of that kind), the ingress qdisc and ifb device it makes. Removing
// what is not there is not an error.
func Remove(t Target, s Setup) error {
	if s == nil {
		return invalid("setup", "nil")
	}
	c, link, err := openTarget(t)
	if err != nil {
		return fmt.Errorf("qos remove %s: %w", s.Kind(), err)
	}
	defer c.close()
	if err := s.remove(c, link); err != nil {
		return fmt.Errorf("qos remove %s on %s: %w", s.Kind(), t, err)
	}
	return nil
}

// conn is a netlink handle in the target namespace plus a raw socket for
// the few requests the netlink library cannot build (fifo limits).
type conn struct {
	ns  netns.NsHandle // closed on close; netns.None() for the caller's ns
	h   *netlink.Handle
	raw *nl.SocketHandle
}

func openNS(path string) (netns.NsHandle, error) {
	if path == "" {
		return netns.None(), nil
	}
	var (
		h   netns.NsHandle
		err error
	)
	if strings.ContainsRune(path, '/') {
		h, err = netns.GetFromPath(path)
	} else {
		h, err = netns.GetFromName(path)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("open netns %q: %w", path, err)
	}
	return h, nil
}

func openConn(nsPath string) (*conn, error) {
	ns, err := openNS(nsPath)
	if err != nil {
		return nil, err
	}
	return connAt(ns, nsPath)
}

// connAt opens sockets in ns (netns.None(): the caller's namespace) and
// takes ownership of ns.
func connAt(ns netns.NsHandle, label string) (*conn, error) {
	c := &conn{ns: ns}
	var err error
	if ns.IsOpen() {
		c.h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	} else {
		c.h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("netlink handle in %q: %w", label, err)
	}
	if err := c.h.SetSocketTimeout(opTimeout); err != nil {
		c.close()
		return nil, fmt.Errorf("netlink timeout: %w", err)
	}
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("netlink socket in %q: %w", label, err)
	}
	tv := unix.NsecToTimeval(opTimeout.Nanoseconds())
	if err := errors.Join(s.SetSendTimeout(&tv), s.SetReceiveTimeout(&tv)); err != nil {
		s.Close()
		c.close()
		return nil, fmt.Errorf("netlink socket timeout: %w", err)
	}
	_ = s.SetExtAck(true) // better kernel messages when available
	c.raw = &nl.SocketHandle{Socket: s}
	return c, nil
}

func (c *conn) close() {
	if c.raw != nil {
		c.raw.Close()
	}
	if c.h != nil {
		c.h.Close()
	}
	if c.ns.IsOpen() {
		_ = c.ns.Close()
	}
}

func (c *conn) request(proto, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(proto, flags)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: c.raw}
	return req
}

func openTarget(t Target) (*conn, netlink.Link, error) {
	if t.Link == "" {
		return nil, nil, invalid("link", "empty interface name")
	}
	if len(t.Link) > unix.IFNAMSIZ-1 || strings.ContainsAny(t.Link, "/ \t\n") {
		return nil, nil, invalid("link", "%q is not a valid interface name", t.Link)
	}
	c, err := openConn(t.NetNS)
	if err != nil {
		return nil, nil, err
	}
	link, err := c.h.LinkByName(t.Link)
	if err != nil {
		c.close()
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, nil, fmt.Errorf("%s: %w", t, ErrLinkNotFound)
		}
		return nil, nil, fmt.Errorf("find %s: %w", t, err)
	}
	return c, link, nil
}
