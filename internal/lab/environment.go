package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/cnperf/cnperf/internal/ethtool"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/hostinfo/hostread"
)

// CNIName is the CNI the lab's environment names: the lab plays the part
// of the CNI (bridge per node, host-gw or VXLAN between nodes).
const CNIName = "cnperf-lab"

// Environment says what the lab is, for the runs made on it: every node
// is this machine (kernel, OS, CPUs, memory), with its own underlay MTU,
// offloads and TCP congestion control (a namespace's own), and the MTU
// of its first pod's interface.
func (l *Lab) Environment(ctx context.Context) (*hostinfo.Environment, error) {
	m, err := hostread.Machine()
	env := &hostinfo.Environment{Platform: "lab", CNI: CNIName, Backend: l.Config.Backend}
	if env.Backend == "" {
		env.Backend = "host-gw"
	}
	if l.Config.VXLANInheritTOS {
		env.Backend += " (tos inherit)"
	}
	env.UnderlaySegmentation = l.Config.UnderlaySegmentation
	if env.UnderlaySegmentation == "" {
		env.UnderlaySegmentation = SegmentHost
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range l.Nodes {
		if err := ctx.Err(); err != nil {
			return env, errors.Join(append(errs, err)...)
		}
		node := m
		node.Name = n.Name
		err := Do(n.NS, func() error {
			var errs []error
			var err error
			if node.UnderlayMTU, err = hostread.LinkMTU(nodeUplink); err != nil {
				errs = append(errs, err)
			}
			if node.Offload, err = hostread.Offload(nodeUplink); err != nil {
				errs = append(errs, err)
			}
			if node.CongestionControl, err = hostread.CongestionControl(); err != nil {
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
		for _, p := range l.Pods {
			if p.Node == n.Name {
				node.PodMTU = p.MTU
				break
			}
		}
		env.Nodes = append(env.Nodes, node)
	}
	return env, errors.Join(errs...)
}

// segmentLikeNIC turns TSO and GSO off on both ends of a node's underlay
// veth (the node's eth0 and the underlay bridge's port), so the kernel
// segments every batch before the veth, as a NIC puts MTU-sized frames on
// its wire.
func segmentLikeNIC(nodeNS, nodeDev, underNS, portDev string) error {
	off := map[string]bool{ethtool.TSO: false, ethtool.GSO: false}
	if err := Do(nodeNS, func() error { return ethtool.Set(nodeDev, off) }); err != nil {
		return fmt.Errorf("underlay segmentation nic: %w", err)
	}
	if err := Do(underNS, func() error { return ethtool.Set(portDev, off) }); err != nil {
		return fmt.Errorf("underlay segmentation nic: %w", err)
	}
	return nil
}
