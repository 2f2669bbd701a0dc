package wirewatch

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// addVXLAN gives the namespace of the calling thread a VXLAN device like
// Flannel's (VNI 1, port 8472) towards remote, with addr on it; tos 1 is
// the kernel's "inherit".
func addVXLAN(local, remote netip.Addr, addr string, tos int) error {
	h, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx0", MTU: 1450}, VxlanId: 1, VtepDevIndex: eth0.Attrs().Index,
		SrcAddr: local.AsSlice(), Group: remote.AsSlice(), Port: PortVXLANLinux, TOS: tos}
	if err := h.LinkAdd(vx); err != nil {
		return err
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(vx, a); err != nil {
		return err
	}
	return h.LinkSetUp(vx)
}

// send sends count datagrams of tos from src:sport to dst:dport.
func send(src, dst netip.AddrPort, tos, count int) error {
	// Unconnected, so the peer's port unreachable does not fail writes.
	lc := net.ListenConfig{Control: engine.SockOpts{TOS: tos}.Control()}
	c, err := lc.ListenPacket(context.Background(), "udp4", src.String())
	if err != nil {
		return err
	}
	defer c.Close()
	for range count {
		if _, err := c.(*net.UDPConn).WriteToUDPAddrPort(make([]byte, 100), dst); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// TestWatchOnTheWire runs the watch in a namespace on the veth towards its
// peer while that namespace sends an EF-marked flow and an unmarked one
// beside it (same addresses, another source port): plain, inside VXLAN
// with the outer TOS 0, and inside VXLAN with tos inherit. The watch
// counts the marked flow's packets only, with the DSCPs on the wire.
func TestWatchOnTheWire(t *testing.T) {
	cases := []struct {
		name         string
		vxlanTOS     int // -1: no VXLAN
		encap        string
		outer, inner int
	}{
		{"plain", -1, EncapNone, 46, -1},
		{"vxlan outer TOS 0", 0, EncapVXLAN, 0, 46},
		{"vxlan tos inherit", 1, EncapVXLAN, 46, 46},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := nettest.NewPair(t)
			src, dst := p.AddrA, p.AddrB
			if c.vxlanTOS >= 0 {
				if err := p.A.Do(func() error { return addVXLAN(p.AddrA, p.AddrB, "10.99.0.1/24", c.vxlanTOS) }); err != nil {
					t.Fatal(err)
				}
				if err := p.B.Do(func() error { return addVXLAN(p.AddrB, p.AddrA, "10.99.0.2/24", c.vxlanTOS) }); err != nil {
					t.Fatal(err)
				}
				src, dst = netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
			}
			spec := probe.Spec{Kind: probe.KindWire, Target: p.AddrB.String(), Duration: probe.Duration(1500 * time.Millisecond),
				Watch: &probe.WatchFlow{Proto: "udp", Src: src.String(), Dst: dst.String(), SrcPort: 61000, DstPort: 5201}}
			type out struct {
				res *probe.Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				var o out
				o.err = p.A.Do(func() error {
					var err error
					o.res, err = Prober{}.Run(context.Background(), spec, probe.Env{})
					return err
				})
				done <- o
			}()
			time.Sleep(300 * time.Millisecond) // the watch's socket opens first
			if err := p.A.Do(func() error {
				if err := send(netip.AddrPortFrom(src, 45000), netip.AddrPortFrom(dst, 5201), 0, 30); err != nil {
					return err
				}
				return send(netip.AddrPortFrom(src, 61000), netip.AddrPortFrom(dst, 5201), ef, 20)
			}); err != nil {
				t.Fatalf("send: %v", err)
			}
			// The reverse direction, from the peer (its packets arrive).
			if err := p.B.Do(func() error { return send(netip.AddrPortFrom(dst, 5201), netip.AddrPortFrom(src, 61000), ef, 5) }); err != nil {
				t.Fatalf("send back: %v", err)
			}
			o := <-done
			if o.err != nil {
				t.Fatalf("watch: %v", o.err)
			}
			w := o.res.WireDSCP
			t.Logf("forward %d packets %s outer %d inner %d; notes %q", w.Packets, w.Encap, deref(w.Outer), deref(w.Inner), o.res.Notes)
			if w.Interface != "eth0" {
				t.Errorf("watched %q, want eth0 (the route to %s)", w.Interface, p.AddrB)
			}
			// The first datagram may wait for ARP; none is lost here.
			if w.Packets != 20 || w.Other != 0 {
				t.Errorf("forward packets %d (other %d), want the marked flow's 20 and nothing of the flood", w.Packets, w.Other)
			}
			if w.Encap != c.encap || deref(w.Outer) != c.outer || deref(w.Inner) != c.inner {
				t.Errorf("encap %q outer %d inner %d, want %q outer %d inner %d", w.Encap, deref(w.Outer), deref(w.Inner), c.encap, c.outer, c.inner)
			}
			r := w.Reverse
			if r.Packets != 5 || r.Encap != c.encap || deref(r.Outer) != c.outer || deref(r.Inner) != c.inner {
				t.Errorf("reverse: %d packets, encap %q outer %d inner %d, want 5, %q outer %d inner %d",
					r.Packets, r.Encap, deref(r.Outer), deref(r.Inner), c.encap, c.outer, c.inner)
			}
		})
	}
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
