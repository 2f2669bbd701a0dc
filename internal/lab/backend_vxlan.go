package lab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vxlanBackend gives each node a VTEP like Flannel's flannel.1: VNI 1, UDP
// port 8472, the node IP as source, learning off, MTU 50 below the
// underlay's, address 10.244.K.0/32. Peers are static: an FDB entry sends
// each peer VTEP's MAC to its node IP, a permanent neighbour entry maps the
// peer's 10.244.J.0 to that MAC, and an onlink route sends 10.244.J.0/24 via
// 10.244.J.0. VTEP MACs are derived from the node index, so every node can
// be configured without waiting for the others.
type vxlanBackend struct{}

func (vxlanBackend) name() string { return BackendVXLAN }

func (vxlanBackend) setupNode(h *netlink.Handle, l *Lab, n Node, uplink netlink.Link) ([]Device, error) {
	tos := 0
	if l.Config.VXLANInheritTOS {
		tos = 1 // the kernel's "inherit"
	}
	mac, err := net.ParseMAC(n.VTEP.MAC)
	if err != nil {
		return nil, fmt.Errorf("vtep mac %q: %w", n.VTEP.MAC, err)
	}
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: n.VTEP.Dev, MTU: n.VTEP.MTU, HardwareAddr: mac, Flags: net.FlagUp},
		VxlanId:   1, VtepDevIndex: uplink.Attrs().Index, SrcAddr: net.IP(n.IP.Addr().AsSlice()),
		Port: VXLANPort, Learning: false, TOS: tos,
	}
	if err := h.LinkAdd(vx); err != nil {
		if kernelLacks(err) {
			return nil, fmt.Errorf("kernel lacks vxlan: %w", err)
		}
		return nil, fmt.Errorf("add vxlan %s: %w", n.VTEP.Dev, err)
	}
	devs := []Device{{NS: n.NS, Name: n.VTEP.Dev, Kind: "vxlan"}}
	if err := h.AddrAdd(vx, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(n.VTEP.Addr, 32))}); err != nil {
		return devs, fmt.Errorf("add %s/32 to %s: %w", n.VTEP.Addr, n.VTEP.Dev, err)
	}
	idx := vx.Attrs().Index
	for _, peer := range l.Nodes {
		if peer.Name == n.Name {
			continue
		}
		pmac, err := net.ParseMAC(peer.VTEP.MAC)
		if err != nil {
			return devs, fmt.Errorf("peer vtep mac %q: %w", peer.VTEP.MAC, err)
		}
		fdb := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: net.IP(peer.IP.Addr().AsSlice()), HardwareAddr: pmac}
		if err := h.NeighSet(fdb); err != nil {
			return devs, fmt.Errorf("fdb %s dst %s: %w", pmac, peer.IP.Addr(), err)
		}
		neigh := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: net.IP(peer.VTEP.Addr.AsSlice()), HardwareAddr: pmac}
		if err := h.NeighSet(neigh); err != nil {
			return devs, fmt.Errorf("neighbour %s lladdr %s: %w", peer.VTEP.Addr, pmac, err)
		}
		r := &netlink.Route{LinkIndex: idx, Dst: ipNet(peer.PodCIDR), Gw: net.IP(peer.VTEP.Addr.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}
		if err := h.RouteAdd(r); err != nil {
			return devs, fmt.Errorf("route %s via %s onlink: %w", peer.PodCIDR, peer.VTEP.Addr, err)
		}
	}
	return devs, nil
}
