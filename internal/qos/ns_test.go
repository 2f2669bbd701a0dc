package qos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// pair is two namespaces of this package's tests joined by a veth whose
// ends are both called eth0: A is 198.18.40.1/24 and fd63:6e70:40::1/64,
// B .2 and ::2.
type pair struct {
	A, B     *nettest.NS
	v4A, v4B netip.Addr
	v6A, v6B netip.Addr
}

func (p *pair) target(ns *nettest.NS) Target { return Target{NetNS: ns.Path(), Link: "eth0"} }

// newPair makes the two namespaces ("qt" + random + -a/-b: the qos area's
// names) and deletes them in t.Cleanup, also when set-up fails.
func newPair(t *testing.T) *pair {
	t.Helper()
	nettest.Require(t)
	var b [3]byte
	_, _ = rand.Read(b[:])
	base := "qt" + hex.EncodeToString(b[:])
	p := &pair{
		v4A: netip.MustParseAddr("198.18.40.1"), v4B: netip.MustParseAddr("198.18.40.2"),
		v6A: netip.MustParseAddr("fd63:6e70:40::1"), v6B: netip.MustParseAddr("fd63:6e70:40::2"),
	}
	var made []*nettest.NS
	t.Cleanup(func() {
		for _, n := range made {
			if err := nettest.Delete(n); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	for _, side := range []string{"a", "b"} {
		n, err := nettest.NewNS(base + "-" + side)
		if err != nil {
			t.Fatalf("make namespace: %v", err)
		}
		made = append(made, n)
	}
	p.A, p.B = made[0], made[1]
	if err := p.link(); err != nil {
		t.Fatalf("link namespaces: %v", err)
	}
	return p
}

func (p *pair) link() error {
	nsA, err := netns.GetFromName(p.A.Name)
	if err != nil {
		return err
	}
	defer nsA.Close()
	nsB, err := netns.GetFromName(p.B.Name)
	if err != nil {
		return err
	}
	defer nsB.Close()
	ha, err := netlink.NewHandleAt(nsA)
	if err != nil {
		return err
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(nsB)
	if err != nil {
		return err
	}
	defer hb.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "eth0b",
		PeerNamespace: netlink.NsFd(int(nsB))}
	if err := ha.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth: %w", err)
	}
	lb, err := hb.LinkByName("eth0b")
	if err != nil {
		return fmt.Errorf("find veth peer: %w", err)
	}
	if err := hb.LinkSetName(lb, "eth0"); err != nil {
		return fmt.Errorf("rename veth peer: %w", err)
	}
	if err := addrs(ha, p.v4A, p.v6A); err != nil {
		return err
	}
	if err := addrs(hb, p.v4B, p.v6B); err != nil {
		return err
	}
	// Permanent neighbour entries: no ARP or ND traffic in the counters,
	// no packet held back while an address resolves.
	la, err := ha.LinkByName("eth0")
	if err != nil {
		return err
	}
	lb, err = hb.LinkByName("eth0")
	if err != nil {
		return err
	}
	for _, side := range []struct {
		h      *netlink.Handle
		self   netlink.Link
		peer   netlink.Link
		v4, v6 netip.Addr
	}{{ha, la, lb, p.v4B, p.v6B}, {hb, lb, la, p.v4A, p.v6A}} {
		for _, ip := range []netip.Addr{side.v4, side.v6} {
			n := &netlink.Neigh{LinkIndex: side.self.Attrs().Index, State: netlink.NUD_PERMANENT,
				IP: ip.AsSlice(), HardwareAddr: side.peer.Attrs().HardwareAddr}
			if ip.Is6() {
				n.Family = netlink.FAMILY_V6
			} else {
				n.Family = netlink.FAMILY_V4
			}
			if err := side.h.NeighSet(n); err != nil {
				return fmt.Errorf("neighbour %s: %w", ip, err)
			}
		}
	}
	return nil
}

func addrs(h *netlink.Handle, v4, v6 netip.Addr) error {
	l, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("find eth0: %w", err)
	}
	for _, a := range []string{v4.String() + "/24", v6.String() + "/64"} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		addr.Flags = 0x80 // IFA_F_NODAD: usable at once
		if err := h.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("add %s: %w", a, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set eth0 up: %w", err)
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	return h.LinkSetUp(lo)
}
