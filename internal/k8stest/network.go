package k8stest

import (
	"context"
	"fmt"
)

// network makes the underlay namespace with its bridge, one namespace per
// node joined to it, and the root namespace's veth to reach them.
func (c *Cluster) network(ctx context.Context) error {
	ul := underlayNS
	cmds := [][]string{
		{"ip", "netns", "add", ul},
		{"ip", "-n", ul, "link", "set", "lo", "up"},
		{"ip", "-n", ul, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", ul, "link", "set", "br0", "up"},
		{"ip", "link", "add", rootVeth, "type", "veth", "peer", "name", "root", "netns", ul},
		{"ip", "-n", ul, "link", "set", "root", "master", "br0", "up"},
		{"ip", "addr", "add", apiIP + "/24", "dev", rootVeth},
		{"ip", "link", "set", rootVeth, "up"},
	}
	for i, n := range c.Nodes {
		port := fmt.Sprintf("n%d", i+1)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.NetNS},
			[]string{"ip", "-n", n.NetNS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ul, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.NetNS},
			[]string{"ip", "-n", ul, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", n.NetNS, "addr", "add", n.IP + "/24", "dev", "eth0"},
			[]string{"ip", "-n", n.NetNS, "link", "set", "eth0", "up"},
			// Service IPs must be routable before kube-proxy's DNAT applies.
			[]string{"ip", "-n", n.NetNS, "route", "add", serviceCIDR, "dev", "eth0"},
			nsenter(n.NetNS, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
			nsenter(n.NetNS, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"),
		)
	}
	for _, a := range cmds {
		if err := run(ctx, a[0], a[1:]...); err != nil {
			return err
		}
	}
	return nil
}
