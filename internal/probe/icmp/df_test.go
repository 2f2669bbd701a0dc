package icmp

import (
	"context"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestPingDontFragment pings across a router whose link to B has MTU
// 1400: with DF a 1450-byte echo never arrives and, once the router's
// "fragmentation needed" taught the kernel the path MTU, later sends are
// refused (TooBig) rather than failing the ping; without DF it is
// fragmented and answered; 1400 bytes fit either way. Needs root.
func TestPingDontFragment(t *testing.T) {
	c := nettest.NewChain(t)
	setMTU := func(ns *nettest.NS, dev string) {
		t.Helper()
		if err := ns.Do(func() error {
			l, err := netlink.LinkByName(dev)
			if err != nil {
				return err
			}
			return netlink.LinkSetMTU(l, 1400)
		}); err != nil {
			t.Fatalf("mtu of %s in %s: %v", dev, ns.Name, err)
		}
	}
	setMTU(c.R, "eth2")
	setMTU(c.B, "eth0")
	warmUp(t, c.A, c.AddrB.String())
	cases := []struct {
		name      string
		ipSize    int
		df        bool
		wantReply bool
		wantBig   bool
	}{
		{"DF over the path MTU", 1450, true, false, true},
		{"fragmented without DF", 1450, false, true, false},
		{"DF within the path MTU", 1400, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindPing, Target: c.AddrB.String(), Count: 4, Size: tc.ipSize - 28, DontFragment: tc.df,
				Interval: probe.Duration(100 * time.Millisecond), Timeout: probe.Duration(500 * time.Millisecond)}
			var res *probe.Result
			err := c.A.Do(func() error {
				var err error
				res, err = (Ping{}).Run(context.Background(), spec, probe.Env{})
				return err
			})
			if err != nil {
				t.Fatalf("ping: %v", err)
			}
			pk := res.Packets
			if got := pk.Received > 0; got != tc.wantReply {
				t.Errorf("received %d of %d, want replies %v; notes %v", pk.Received, pk.Sent, tc.wantReply, res.Notes)
			}
			if got := pk.TooBig > 0; got != tc.wantBig {
				t.Errorf("too big %d, want refusals %v; notes %v", pk.TooBig, tc.wantBig, res.Notes)
			}
		})
	}
}
