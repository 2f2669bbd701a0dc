package lab

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// hostGWBackend routes each peer's pod CIDR via the peer's node IP, like
// Flannel host-gw and Calico without encapsulation. It needs the nodes on
// one L2 segment, which the underlay bridge is.
type hostGWBackend struct{}

func (hostGWBackend) name() string { return BackendHostGW }

func (hostGWBackend) setupNode(h *netlink.Handle, l *Lab, n Node, uplink netlink.Link) ([]Device, error) {
	for _, peer := range l.Nodes {
		if peer.Name == n.Name {
			continue
		}
		r := &netlink.Route{LinkIndex: uplink.Attrs().Index, Dst: ipNet(peer.PodCIDR), Gw: net.IP(peer.IP.Addr().AsSlice())}
		if err := h.RouteAdd(r); err != nil {
			return nil, fmt.Errorf("route %s via %s: %w", peer.PodCIDR, peer.IP.Addr(), err)
		}
	}
	return nil, nil
}
