package k8stest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Bridge is the harness's own pod network, no CNI daemon: per node a
// conflist of the reference plugins (bridge with host-local IPAM on the
// node's pod CIDR, portmap, bandwidth) and static routes to the other
// nodes' pod CIDRs via their node IPs, as a CNI daemon would write them.
type Bridge struct{}

// Facts name the bridge conflist.
func (Bridge) Facts() CNIFacts {
	return CNIFacts{Name: "bridge", PodMTU: 1500, Plugins: []string{"bridge", "portmap", "bandwidth"}}
}

// Backends: the bridge has one datapath, named "".
func (Bridge) Backends() []string { return []string{""} }

// SwitchBackend refuses every backend but the bridge's one.
func (Bridge) SwitchBackend(_ context.Context, _ *Cluster, backend string) error {
	if backend != "" {
		return fmt.Errorf("the bridge CNI has no backend %q (it has one datapath)", backend)
	}
	return nil
}

// Install writes every node's conflist and the routes between nodes.
func (Bridge) Install(ctx context.Context, c *Cluster) error {
	for _, n := range c.Nodes {
		if err := writeBridgeConflist(n, n.PodCIDR, (Bridge{}).Facts().PodMTU, filepath.Join(c.RunDir, n.Name, "ipam")); err != nil {
			return err
		}
		for _, m := range c.Nodes {
			if m == n {
				continue
			}
			if err := run(ctx, "ip", "-n", n.NetNS, "route", "add", m.PodCIDR, "via", m.IP); err != nil {
				return err
			}
		}
	}
	return c.routeRootToPods(ctx)
}

// writeBridgeConflist writes the node's CNI configuration: the bridge
// plugin (cni0, the pods' gateway) with host-local addresses from subnet,
// then portmap and bandwidth (the shaping annotations).
func writeBridgeConflist(n *Node, subnet string, mtu int, ipamDir string) error {
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "cnperf-harness",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
				"hairpinMode": true, "mtu": mtu,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": subnet}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}}, "dataDir": ipamDir}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return os.WriteFile(filepath.Join(n.CNIDir, "10-cnperf-harness.conflist"), b, 0o644)
}
