package lab

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestUpLinksCarry: when Up returns, every veth and every bridge with a
// port is operationally up. The kernel brings a new link's carrier, and
// with it the queue that transmits, up asynchronously (up to a second
// later, more on a busy machine); until then what is sent there is
// dropped, so a first SYN across a new lab waited a second for its
// retransmission. Several labs, as one may be ready by chance.
func TestUpLinksCarry(t *testing.T) {
	for _, backend := range []string{BackendHostGW, BackendVXLAN} {
		t.Run(backend, func(t *testing.T) {
			for i := 0; i < 8; i++ {
				l := upLab(t, Config{Nodes: 2, PodsPerNode: 2, Backend: backend})
				for _, d := range l.Devices {
					if d.Kind != "veth" && d.Kind != "bridge" {
						continue
					}
					if state, err := operState(l, d); err != nil || state != netlink.OperUp {
						t.Errorf("lab %d: %s/%s (%s) is %v (%v) when Up returned, want up", i, d.NS, d.Name, d.Kind, state, err)
					}
				}
				if _, err := l.Down(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// operState reads d's operational state.
func operState(l *Lab, d Device) (netlink.LinkOperState, error) {
	h, err := openNS(d.NS)
	if err != nil {
		return 0, err
	}
	defer h.close()
	link, err := h.nl.LinkByName(d.Name)
	if err != nil {
		return 0, err
	}
	return link.Attrs().OperState, nil
}
