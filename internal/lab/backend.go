package lab

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// A backend connects the nodes' pod networks across the underlay.
type backend interface {
	name() string
	// setupNode configures node n (its uplink and bridge exist) so that it
	// reaches every other node's pod CIDR. It returns the devices it made.
	setupNode(h *netlink.Handle, l *Lab, n Node, uplink netlink.Link) ([]Device, error)
}

func backendFor(name string) backend {
	if name == BackendVXLAN {
		return vxlanBackend{}
	}
	return hostGWBackend{}
}

// kernelOnlyBackends are backends real clusters use that the lab knows by
// name; they are accepted only when the kernel has their device.
var kernelOnlyBackends = map[string]func() netlink.Link{
	"ipip": func() netlink.Link { return &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "cnlprobe0"}} },
	"geneve": func() netlink.Link {
		return &netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: "cnlprobe0"}, ID: 1, Remote: net.IPv4(192, 0, 2, 1)}
	},
	"wireguard": func() netlink.Link { return &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: "cnlprobe0"}} },
}

// checkBackend accepts host-gw and vxlan; for ipip, geneve and wireguard it
// says plainly whether the kernel lacks the device.
func checkBackend(name string) error {
	switch name {
	case BackendHostGW, BackendVXLAN:
		return nil
	}
	mk, ok := kernelOnlyBackends[name]
	if !ok {
		return fmt.Errorf("unknown backend %q: want host-gw or vxlan", name)
	}
	lacks, err := probeDevice(mk())
	if err != nil {
		return fmt.Errorf("backend %s: cannot check the kernel: %w", name, err)
	}
	if lacks {
		return fmt.Errorf("backend %s: kernel lacks %s (use host-gw or vxlan)", name, name)
	}
	return fmt.Errorf("backend %s: the kernel has %s devices but the lab does not build this backend yet (use host-gw or vxlan)", name, name)
}

// probeDevice tries to create link in a scratch namespace that disappears
// afterwards; lacks is true when the kernel does not know the device kind.
func probeDevice(link netlink.Link) (lacks bool, err error) {
	var nl *netlink.Handle
	ns, err := nsthread.Create("", func() error { // unnamed: freed when its last fd closes
		var err error
		nl, err = netlink.NewHandle()
		return err
	})
	if nl != nil {
		defer nl.Close()
	}
	if err != nil {
		return false, fmt.Errorf("scratch namespace: %w", err)
	}
	defer ns.Close()
	if err := nl.LinkAdd(link); err != nil {
		if kernelLacks(err) {
			return true, nil
		}
		return false, fmt.Errorf("create %s device: %w", link.Type(), err)
	}
	return false, nil
}
