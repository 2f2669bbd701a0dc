package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// loIndex is the loopback's index in every new namespace.
const loIndex = 1

// build makes the underlay, then every node with its pods in parallel
// goroutines (each with its own netlink sockets). It records devices in l.
// On error the caller removes what was made (by prefix).
func build(ctx context.Context, l *Lab) error {
	c := l.Config
	be := backendFor(c.Backend)
	under, err := createNS(l.Underlay.NS, sysctlNoIPv6)
	if err != nil {
		return err
	}
	defer under.close()
	if err := l.failpoint("underlay"); err != nil {
		return err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: underlayBridge, MTU: c.MTU, Flags: net.FlagUp}}
	if err := under.nl.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge %s in %s: %w", underlayBridge, under.name, err)
	}
	if err := under.nl.AddrAdd(br, &netlink.Addr{IPNet: ipNet(l.Underlay.Addr)}); err != nil {
		return fmt.Errorf("add %s to %s in %s: %w", l.Underlay.Addr, underlayBridge, under.name, err)
	}
	if err := under.nl.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: loIndex}}); err != nil {
		return fmt.Errorf("set lo up in %s: %w", under.name, err)
	}
	devs := make([][]Device, len(l.Nodes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(4, 2*runtime.GOMAXPROCS(0)))
	for i := range l.Nodes {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			d, err := buildNode(l, be, i, under, br.Index)
			devs[i] = d
			if err != nil {
				return fmt.Errorf("node %s: %w", l.Nodes[i].Name, err)
			}
			return nil
		})
	}
	err = g.Wait()
	l.Devices = append(l.Devices, Device{NS: under.name, Name: underlayBridge, Kind: "bridge"})
	for _, d := range devs {
		l.Devices = append(l.Devices, d...)
	}
	return err
}

// buildNode makes node i's namespace, uplink, bridge, backend state and pods.
func buildNode(l *Lab, be backend, i int, under *nsHandles, brIndex int) (devs []Device, err error) {
	c := l.Config
	n := l.Nodes[i]
	nh, err := createNS(n.NS, append([]sysctl{sysctlForward}, sysctlNoIPv6...))
	if err != nil {
		return nil, err
	}
	defer nh.close()
	uh, err := netlink.NewHandleAt(under.ns)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", under.name, err)
	}
	defer uh.Close()
	if err := nh.nl.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: loIndex}}); err != nil {
		return nil, fmt.Errorf("set lo up: %w", err)
	}

	// Uplink: a veth from the underlay bridge to the node's eth0.
	port := underlayPort(n.Index)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: port, MTU: c.MTU, Flags: net.FlagUp, MasterIndex: brIndex},
		PeerName:  nodeUplink, PeerNamespace: netlink.NsFd(int(nh.ns)),
	}
	if err := uh.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("add veth %s/%s: %w", port, nodeUplink, err)
	}
	devs = append(devs, Device{NS: under.name, Name: port, Kind: "veth"}, Device{NS: n.NS, Name: nodeUplink, Kind: "veth"})
	up, err := nh.nl.LinkByName(nodeUplink)
	if err != nil {
		return devs, fmt.Errorf("find %s: %w", nodeUplink, err)
	}
	if err := nh.nl.AddrAdd(up, &netlink.Addr{IPNet: ipNet(n.IP)}); err != nil {
		return devs, fmt.Errorf("add %s to %s: %w", n.IP, nodeUplink, err)
	}
	if err := nh.nl.LinkSetUp(up); err != nil {
		return devs, fmt.Errorf("set %s up: %w", nodeUplink, err)
	}
	if r, ok := c.NodeUnderlayRates[n.Name]; ok {
		// This node's link is slower, both ways: its egress and the
		// underlay port's egress toward it.
		if err := addTBF(nh.nl, up, r); err != nil {
			return devs, err
		}
		pl, err := uh.LinkByName(port)
		if err != nil {
			return devs, fmt.Errorf("find %s: %w", port, err)
		}
		if err := addTBF(uh, pl, r); err != nil {
			return devs, err
		}
	} else if c.UnderlayRateBps > 0 {
		if err := addTBF(nh.nl, up, c.UnderlayRateBps); err != nil {
			return devs, err
		}
	}
	if c.UnderlaySegmentation == SegmentNIC {
		if err := segmentLikeNIC(n.NS, nodeUplink, under.name, port); err != nil {
			return devs, err
		}
	}
	// The underlay routes replies to this node's pods through the node.
	if err := uh.RouteAdd(&netlink.Route{Dst: ipNet(n.PodCIDR), Gw: net.IP(n.IP.Addr().AsSlice())}); err != nil {
		return devs, fmt.Errorf("underlay route to %s: %w", n.PodCIDR, err)
	}

	// The pods' bridge.
	podMTU := c.MTU
	if n.VTEP != nil {
		podMTU = n.VTEP.MTU
	}
	cni := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: nodeBridge, MTU: podMTU, Flags: net.FlagUp}}
	if err := nh.nl.LinkAdd(cni); err != nil {
		return devs, fmt.Errorf("add bridge %s: %w", nodeBridge, err)
	}
	devs = append(devs, Device{NS: n.NS, Name: nodeBridge, Kind: "bridge"})
	gw := netip.PrefixFrom(n.Gateway, n.PodCIDR.Bits())
	if err := nh.nl.AddrAdd(cni, &netlink.Addr{IPNet: ipNet(gw)}); err != nil {
		return devs, fmt.Errorf("add %s to %s: %w", gw, nodeBridge, err)
	}

	d, err := be.setupNode(nh.nl, l, n, up)
	devs = append(devs, d...)
	if err != nil {
		return devs, fmt.Errorf("%s backend: %w", be.name(), err)
	}
	if err := l.failpoint("node"); err != nil {
		return devs, err
	}

	for _, p := range l.Pods {
		if p.Node != n.Name {
			continue
		}
		d, err := buildPod(nh, cni.Index, n, p)
		devs = append(devs, d...)
		if err != nil {
			return devs, fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return devs, nil
}

// buildPod makes a pod's namespace with eth0 on the node's bridge.
func buildPod(nh *nsHandles, cniIndex int, n Node, p Pod) ([]Device, error) {
	ph, err := createNS(p.NS, sysctlNoIPv6)
	if err != nil {
		return nil, err
	}
	defer ph.close()
	// Pod j of node K is pod p's suffix; the host-side name only has to be
	// unique in the node.
	host := podHostDev(podIndex(p))
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: host, MTU: p.MTU, Flags: net.FlagUp, MasterIndex: cniIndex},
		PeerName:  podDev, PeerNamespace: netlink.NsFd(int(ph.ns)),
	}
	if err := nh.nl.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("add veth %s/%s: %w", host, podDev, err)
	}
	devs := []Device{{NS: n.NS, Name: host, Kind: "veth"}, {NS: p.NS, Name: podDev, Kind: "veth"}}
	if err := ph.nl.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: loIndex}}); err != nil {
		return devs, fmt.Errorf("set lo up: %w", err)
	}
	eth, err := ph.nl.LinkByName(podDev)
	if err != nil {
		return devs, fmt.Errorf("find %s: %w", podDev, err)
	}
	if err := ph.nl.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(p.IP)}); err != nil {
		return devs, fmt.Errorf("add %s: %w", p.IP, err)
	}
	if err := ph.nl.LinkSetUp(eth); err != nil {
		return devs, fmt.Errorf("set %s up: %w", podDev, err)
	}
	def := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(n.Gateway.AsSlice())}
	if err := ph.nl.RouteAdd(def); err != nil {
		return devs, fmt.Errorf("default route via %s: %w", n.Gateway, err)
	}
	return devs, nil
}

// podIndex returns j of pod nK-pj.
func podIndex(p Pod) int {
	var k, j int
	if _, err := fmt.Sscanf(p.Name, "n%d-p%d", &k, &j); err != nil {
		return 0
	}
	return j
}

// tbfParams returns tbf's burst and limit in bytes for a link rate: the
// burst is 1 ms at the rate but at least 64 KiB (a whole GSO packet), the
// queue holds 25 ms at the rate beyond the burst (like the CNI bandwidth
// plugin's latency).
func tbfParams(rateBps uint64) (burst, limit uint32) {
	bytesPerSec := rateBps / 8
	b := max(bytesPerSec/1000, 64<<10)
	lim := b + bytesPerSec*25/1000
	return uint32(min(b, 1<<31)), uint32(min(lim, 1<<31))
}

// addTBF limits link's egress to rateBps with tbf.
func addTBF(h *netlink.Handle, link netlink.Link, rateBps uint64) error {
	burst, limit := tbfParams(rateBps)
	bytesPerSec := rateBps / 8
	// tbf's buffer is the burst's transmit time in scheduler ticks of 64 ns.
	bufNS := uint64(burst) * 1e9 / bytesPerSec
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytesPerSec, Limit: limit, Buffer: uint32(min(bufNS>>6, 1<<32-1)),
	}
	if err := h.QdiscReplace(q); err != nil {
		return fmt.Errorf("add tbf %d bit/s on %s: %w", rateBps, link.Attrs().Name, err)
	}
	return nil
}

// ipNet converts a prefix (address with its length) to *net.IPNet.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// failpoint lets tests make Up fail at a named step.
func (l *Lab) failpoint(step string) error {
	if l.Config.failAt == step {
		return fmt.Errorf("failpoint %s: %w", step, errFailpoint)
	}
	return nil
}

var errFailpoint = errors.New("injected failure")

// kernelLacks says whether err means the kernel has no such device kind.
func kernelLacks(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP)
}
