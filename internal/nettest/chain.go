package nettest

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Chain is three namespaces in a line, A — R — B, where R routes between
// two subnets: A (198.18.1.1/24, fd63:6e70:1::1/64) reaches B
// (198.18.2.2/24, fd63:6e70:2::2/64) through R (198.18.1.2 and 198.18.2.1,
// fd63:6e70:1::2 and fd63:6e70:2::1). A's and B's default routes point at
// R. R forwards IPv4 and IPv6, and R and B send ICMP errors without rate
// limiting (icmp_ratelimit 0), so tests that burst probes get every error.
type Chain struct {
	A, R, B *NS
	// IPv4 addresses: A's, R's on A's side, R's on B's side, B's.
	AddrA, AddrRA, AddrRB, AddrB netip.Addr
	// IPv6 (ULA) addresses, in the same order.
	Addr6A, Addr6RA, Addr6RB, Addr6B netip.Addr
}

// NewChain makes an A — R — B chain. It skips t without root; everything
// is deleted in t.Cleanup, also when set-up fails half way.
func NewChain(t testing.TB) *Chain {
	t.Helper()
	return makeForTest(t, "namespace chain", MakeChain)
}

// MakeChain is NewChain for programs: it returns a cleanup to call
// whatever happens, also when err is not nil.
func MakeChain() (*Chain, func() error, error) {
	suffix := randomSuffix()
	var made []*NS
	cleanup := func() error {
		var errs []error
		for _, n := range made {
			errs = append(errs, Delete(n))
		}
		return errors.Join(errs...)
	}
	c := &Chain{
		AddrA: netip.MustParseAddr("198.18.1.1"), AddrRA: netip.MustParseAddr("198.18.1.2"),
		AddrRB: netip.MustParseAddr("198.18.2.1"), AddrB: netip.MustParseAddr("198.18.2.2"),
		Addr6A: netip.MustParseAddr("fd63:6e70:1::1"), Addr6RA: netip.MustParseAddr("fd63:6e70:1::2"),
		Addr6RB: netip.MustParseAddr("fd63:6e70:2::1"), Addr6B: netip.MustParseAddr("fd63:6e70:2::2"),
	}
	for _, p := range []struct {
		dst **NS
		tag string
	}{{&c.A, "a"}, {&c.R, "r"}, {&c.B, "b"}} {
		n, err := NewNS(Prefix + suffix + "-" + p.tag)
		if err != nil {
			return nil, cleanup, err
		}
		made = append(made, n)
		*p.dst = n
	}
	if err := vethBetween(c.A, c.R, "eth1", [2]netip.Addr{c.AddrA, c.AddrRA}, [2]netip.Addr{c.Addr6A, c.Addr6RA}); err != nil {
		return nil, cleanup, err
	}
	if err := vethBetween(c.B, c.R, "eth2", [2]netip.Addr{c.AddrB, c.AddrRB}, [2]netip.Addr{c.Addr6B, c.Addr6RB}); err != nil {
		return nil, cleanup, err
	}
	if err := errors.Join(c.A.waitCarry("eth0"), c.R.waitCarry("eth1"), c.B.waitCarry("eth0"), c.R.waitCarry("eth2")); err != nil {
		return nil, cleanup, err
	}
	if err := defaultRoutes(c.A, c.AddrRA, c.Addr6RA); err != nil {
		return nil, cleanup, err
	}
	if err := defaultRoutes(c.B, c.AddrRB, c.Addr6RB); err != nil {
		return nil, cleanup, err
	}
	if err := c.R.Do(func() error {
		return errors.Join(
			writeSysctl("net/ipv4/ip_forward", "1"),
			writeSysctl("net/ipv6/conf/all/forwarding", "1"),
			writeSysctl("net/ipv4/icmp_ratelimit", "0"),
			writeSysctl("net/ipv6/icmp/ratelimit", "0"))
	}); err != nil {
		return nil, cleanup, fmt.Errorf("configure router %s: %w", c.R.Name, err)
	}
	if err := c.B.Do(func() error {
		return errors.Join(
			writeSysctl("net/ipv4/icmp_ratelimit", "0"),
			writeSysctl("net/ipv6/icmp/ratelimit", "0"))
	}); err != nil {
		return nil, cleanup, fmt.Errorf("configure %s: %w", c.B.Name, err)
	}
	return c, cleanup, nil
}

// writeSysctl writes a /proc/sys/net value; call it inside NS.Do, since
// /proc/sys/net belongs to the namespace of the thread that opens it.
func writeSysctl(key, val string) error {
	if err := os.WriteFile("/proc/sys/"+key, []byte(val), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, val, err)
	}
	return nil
}

// vethBetween joins end (its device eth0) and r (its device rName) with a
// veth and gives both ends the addresses v4[0]/24, v6[0]/64 (end) and
// v4[1], v6[1] (r), loopback up in both.
func vethBetween(end, r *NS, rName string, v4, v6 [2]netip.Addr) error {
	he, err := netlink.NewHandleAt(end.handle)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", end.Name, err)
	}
	defer he.Close()
	hr, err := netlink.NewHandleAt(r.handle)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", r.Name, err)
	}
	defer hr.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: rName,
		PeerNamespace: netlink.NsFd(int(r.handle))}
	if err := he.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s/eth0 — %s/%s: %w", end.Name, r.Name, rName, err)
	}
	for i, side := range []struct {
		h   *netlink.Handle
		dev string
	}{{he, "eth0"}, {hr, rName}} {
		l, err := side.h.LinkByName(side.dev)
		if err != nil {
			return fmt.Errorf("find %s: %w", side.dev, err)
		}
		for _, a := range []string{v4[i].String() + "/24", v6[i].String() + "/64"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if strings.Contains(a, ":") {
				// No duplicate-address detection: usable at once.
				addr.Flags = unix.IFA_F_NODAD
			}
			if err := side.h.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("add %s on %s: %w", a, side.dev, err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", side.dev, err)
		}
		lo, err := side.h.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo: %w", err)
		}
		if err := side.h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	return nil
}

// defaultRoutes points n's IPv4 and IPv6 default routes at gw4 and gw6.
func defaultRoutes(n *NS, gw4, gw6 netip.Addr) error {
	h, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", n.Name, err)
	}
	defer h.Close()
	for _, gw := range []netip.Addr{gw4, gw6} {
		if err := h.RouteAdd(&netlink.Route{Gw: gw.AsSlice()}); err != nil {
			return fmt.Errorf("default route via %s in %s: %w", gw, n.Name, err)
		}
	}
	return nil
}
