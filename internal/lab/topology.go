package lab

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Names of things. Interface names live in their namespace, so they can be
// short and the same in every lab (the kernel allows 15 characters).
const (
	nsPrefix       = "cnl-"
	underlayBridge = "br0"
	nodeUplink     = "eth0" // node's end of its underlay veth
	nodeBridge     = "cni0"
	vtepDev        = "flannel.1"
	podDev         = "eth0"
	// maxPodsPerNode: pods take .2 to .254 of the node's /24.
	maxPodsPerNode = 253
)

// Prefix returns the namespace-name prefix of the lab name.
func Prefix(name string) string { return nsPrefix + name + "-" }

func underlayNS(lab string) string     { return Prefix(lab) + "underlay" }
func nodeName(k int) string            { return fmt.Sprintf("n%d", k) }
func podName(k, j int) string          { return fmt.Sprintf("n%d-p%d", k, j) }
func nsName(lab, member string) string { return Prefix(lab) + member }
func underlayPort(k int) string        { return fmt.Sprintf("n%d", k) }    // underlay side of node K's veth
func podHostDev(j int) string          { return fmt.Sprintf("veth%d", j) } // node side of pod j's veth
func vtepMAC(k int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x63, 0x6e, 0x6c, byte(k >> 8), byte(k)}
}
func addrAt(base netip.Addr, off uint32) netip.Addr {
	b := base.As4()
	v := binary.BigEndian.Uint32(b[:]) + off
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// checkCIDRs checks that both CIDRs are IPv4, hold the nodes and pods, and
// do not overlap.
func checkCIDRs(c Config) error {
	pod, under := c.PodCIDR.Masked(), c.UnderlayCIDR.Masked()
	if !pod.Addr().Is4() || !under.Addr().Is4() {
		return fmt.Errorf("pod CIDR %s and underlay CIDR %s must be IPv4", c.PodCIDR, c.UnderlayCIDR)
	}
	if pod.Bits() > 23 {
		return fmt.Errorf("pod CIDR %s: want /23 or larger (one /24 per node)", c.PodCIDR)
	}
	if slots := 1 << (24 - pod.Bits()); c.Nodes >= slots {
		return fmt.Errorf("pod CIDR %s holds %d node subnets (the first is not used): too small for %d nodes", c.PodCIDR, slots-1, c.Nodes)
	}
	if under.Bits() > 28 {
		return fmt.Errorf("underlay CIDR %s: want /28 or larger", c.UnderlayCIDR)
	}
	if hosts := 1<<(32-under.Bits()) - 2; 10+c.Nodes > hosts {
		return fmt.Errorf("underlay CIDR %s holds node IPs for at most %d nodes, not %d", c.UnderlayCIDR, hosts-10, c.Nodes)
	}
	if pod.Overlaps(under) {
		return fmt.Errorf("pod CIDR %s overlaps underlay CIDR %s", c.PodCIDR, c.UnderlayCIDR)
	}
	return nil
}

// plan computes names and addresses; it touches nothing.
func plan(c Config) *Lab {
	pod, under := c.PodCIDR.Masked(), c.UnderlayCIDR.Masked()
	uaddr := netip.PrefixFrom(addrAt(under.Addr(), 1), under.Bits())
	l := &Lab{
		Name: c.Name, Config: c, Phase: PhaseCreating, CreatedAt: time.Now().UTC(),
		Underlay: Underlay{NS: underlayNS(c.Name), Bridge: underlayBridge, Addr: uaddr,
			ServerAddr: netip.AddrPortFrom(uaddr.Addr(), DefaultServerPort).String()},
	}
	l.Namespaces = append(l.Namespaces, l.Underlay.NS)
	podMTU := c.MTU
	if c.Backend == BackendVXLAN {
		podMTU = c.MTU - VXLANOverhead
	}
	for k := 1; k <= c.Nodes; k++ {
		subnet := addrAt(pod.Addr(), uint32(k)<<8)
		n := Node{
			Name: nodeName(k), Index: k, NS: nsName(c.Name, nodeName(k)),
			IP:      netip.PrefixFrom(addrAt(under.Addr(), uint32(10+k)), under.Bits()),
			PodCIDR: netip.PrefixFrom(subnet, 24),
			Gateway: addrAt(subnet, 1),
		}
		if c.Backend == BackendVXLAN {
			n.VTEP = &VTEP{Dev: vtepDev, Addr: subnet, MAC: vtepMAC(k).String(), MTU: podMTU}
		}
		l.Nodes = append(l.Nodes, n)
		l.Namespaces = append(l.Namespaces, n.NS)
		for j := 1; j <= c.PodsPerNode; j++ {
			p := Pod{Name: podName(k, j), Node: n.Name, NS: nsName(c.Name, podName(k, j)),
				IP: netip.PrefixFrom(addrAt(subnet, uint32(1+j)), 24), MTU: podMTU}
			l.Pods = append(l.Pods, p)
			l.Namespaces = append(l.Namespaces, p.NS)
		}
	}
	return l
}
