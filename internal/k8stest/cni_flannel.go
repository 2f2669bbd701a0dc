package k8stest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FlannelVersion is the flannel release test/k8s/build.sh builds flanneld
// from (github.com/flannel-io/flannel, through the Go module proxy).
const FlannelVersion = "v0.28.10"

// FlannelBackends are the flannel backends this kernel can run (it lacks
// ipip and wireguard; udp needs a CGO build).
var FlannelBackends = []string{"vxlan", "host-gw"}

// Flannel is the real flannel daemon as the pod network: flanneld on every
// node (in the node's namespace, supervised by the harness as a DaemonSet
// would run it) with the Kubernetes subnet manager (the nodes' pod CIDRs,
// node annotations), under its own ServiceAccount, ClusterRole (flannel's
// own rules) and a token from the TokenRequest API, never the admin's.
// Pods get their network the way flannel's CNI plugin gives it: from
// flanneld's subnet.env, a bridge (cni0, default gateway, the flannel
// network routed via it, MTU FLANNEL_MTU) with host-local addresses from
// FLANNEL_SUBNET, then portmap and bandwidth. The plugin itself
// (github.com/flannel-io/cni-plugin) is not served by the module proxy;
// the conflist is what it hands the bridge plugin (see docs/kubernetes.md).
type Flannel struct {
	// Backend is flannel's backend type, one of FlannelBackends.
	Backend string

	kubeconfig string
	procs      []*proc
	mtu        int // FLANNEL_MTU of the running backend
}

// Facts name flannel, its backend and the plugins its conflist chains.
func (f *Flannel) Facts() CNIFacts {
	return CNIFacts{Name: "flannel", Backend: f.Backend, Version: FlannelVersion, PodMTU: f.mtu, Plugins: []string{"bridge", "portmap", "bandwidth"}}
}

// Backends are FlannelBackends.
func (f *Flannel) Backends() []string { return FlannelBackends }

// Install makes flannel's RBAC and token, starts flanneld on every node and
// writes each node's conflist from its subnet.env.
func (f *Flannel) Install(ctx context.Context, c *Cluster) error {
	if !slices.Contains(FlannelBackends, f.Backend) {
		return fmt.Errorf("flannel backend %q: this harness runs %s (the kernel lacks ipip and wireguard)", f.Backend, strings.Join(FlannelBackends, ", "))
	}
	kcfg, err := f.credentials(ctx, c)
	if err != nil {
		return fmt.Errorf("flannel's service account: %w", err)
	}
	f.kubeconfig = kcfg
	if err := f.start(ctx, c); err != nil {
		return err
	}
	return c.routeRootToPods(ctx)
}

// SwitchBackend restarts flannel with another backend: flanneld stops on
// every node, its VXLAN device, the pods' bridge and the routes to the
// other nodes' pods go, and flanneld starts again with the new backend and
// writes a new subnet.env (the MTU changes with it). Pods made before keep
// their old network: the caller recreates them.
func (f *Flannel) SwitchBackend(ctx context.Context, c *Cluster, backend string) error {
	if !slices.Contains(FlannelBackends, backend) {
		return fmt.Errorf("flannel backend %q: this harness runs %s", backend, strings.Join(FlannelBackends, ", "))
	}
	for _, p := range f.procs {
		c.stop(p)
	}
	f.procs = nil
	for _, n := range c.Nodes {
		for _, dev := range []string{"flannel.1", "cni0"} {
			if linkExists(ctx, n.NetNS, dev) {
				if err := run(ctx, "ip", "-n", n.NetNS, "link", "del", dev); err != nil {
					return err
				}
			}
		}
		for _, m := range c.Nodes {
			if m != n {
				_ = run(ctx, "ip", "-n", n.NetNS, "route", "del", m.PodCIDR) // host-gw's; vxlan's went with flannel.1
			}
		}
	}
	f.Backend = backend
	return f.start(ctx, c)
}

func linkExists(ctx context.Context, ns, dev string) bool {
	return run(ctx, "ip", "-n", ns, "link", "show", dev) == nil
}

// credentials make flannel's ServiceAccount in kube-system, its
// ClusterRole and binding (the rules of flannel's own chart), and a
// kubeconfig with a token for that account.
func (f *Flannel) credentials(ctx context.Context, c *Cluster) (string, error) {
	objs := []struct {
		path string
		body map[string]any
	}{
		{"/api/v1/namespaces/kube-system/serviceaccounts", map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "flannel"}}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "flannel"},
			"rules": []any{
				map[string]any{"apiGroups": []string{""}, "resources": []string{"pods", "nodes", "namespaces"}, "verbs": []string{"get", "list", "watch"}},
				map[string]any{"apiGroups": []string{""}, "resources": []string{"nodes/status"}, "verbs": []string{"patch"}},
			}}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "flannel"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "flannel"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "flannel", "namespace": "kube-system"}}}},
	}
	for _, o := range objs {
		if err := c.apiDo(ctx, http.MethodPost, o.path, o.body, nil); err != nil {
			return "", err
		}
	}
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	err := c.apiDo(ctx, http.MethodPost, "/api/v1/namespaces/kube-system/serviceaccounts/flannel/token", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{"expirationSeconds": 24 * 3600}}, &tr)
	if err != nil {
		return "", err
	}
	if tr.Status.Token == "" {
		return "", errors.New("TokenRequest returned no token")
	}
	return c.UserKubeconfig("flannel", tr.Status.Token)
}

// start runs flanneld on every node with f.Backend, waits for each node's
// subnet.env and for the node's backend annotation to name f.Backend, and
// writes the node's conflist.
func (f *Flannel) start(ctx context.Context, c *Cluster) error {
	bin := filepath.Join(c.BinDir, "flanneld-"+FlannelVersion)
	netConf, _ := json.Marshal(map[string]any{"Network": clusterCIDR, "EnableIPv4": true, "Backend": map[string]string{"Type": f.Backend}})
	t0 := time.Now()
	if err := flannelManifest(netConf).apply(ctx, c); err != nil {
		return fmt.Errorf("flannel's DaemonSet and ConfigMap: %w", err)
	}
	for _, n := range c.Nodes {
		dir := filepath.Join(c.RunDir, n.Name, "flannel")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		confPath, envPath := filepath.Join(dir, "net-conf.json"), filepath.Join(dir, "subnet.env")
		if err := os.WriteFile(confPath, netConf, 0o644); err != nil {
			return err
		}
		if err := os.Remove(envPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		p, err := c.start(fmt.Sprintf("%s-flanneld-%s", n.Name, f.Backend), nsenter(n.NetNS, "env", "NODE_NAME="+n.Name, bin,
			"--kube-subnet-mgr", "--kubeconfig-file="+f.kubeconfig, "--iface=eth0", "--ip-masq",
			"--net-config-path="+confPath, "--subnet-file="+envPath)...)
		if err != nil {
			return err
		}
		f.procs = append(f.procs, p)
	}
	for _, n := range c.Nodes {
		envPath := filepath.Join(c.RunDir, n.Name, "flannel", "subnet.env")
		var env subnetEnv
		err := c.poll(ctx, n.Name+" flanneld's subnet.env", 2*time.Minute, func() (err error) {
			env, err = readSubnetEnv(envPath)
			return err
		})
		if err != nil {
			return err
		}
		if err := c.poll(ctx, n.Name+" annotated with flannel backend "+f.Backend, time.Minute, func() error {
			var node struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := c.getJSON(ctx, "/api/v1/nodes/"+n.Name, &node); err != nil {
				return err
			}
			if got := node.Metadata.Annotations["flannel.alpha.coreos.com/backend-type"]; got != f.Backend {
				return fmt.Errorf("backend-type %q", got)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := writeFlannelConflist(n, env, filepath.Join(c.RunDir, n.Name, "ipam")); err != nil {
			return err
		}
		f.mtu = env.MTU
		for _, m := range c.Nodes {
			if m == n {
				continue
			}
			err := c.poll(ctx, fmt.Sprintf("%s: flannel's route to %s's pods", n.Name, m.Name), time.Minute, func() error {
				out, err := output(ctx, "ip", "-n", n.NetNS, "route", "show", m.PodCIDR)
				if err != nil {
					return err
				}
				if strings.TrimSpace(out) == "" {
					return errors.New("no route yet")
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		c.log.Info("flannel up", "node", n.Name, "backend", f.Backend, "subnet", env.Subnet, "mtu", env.MTU, "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// subnetEnv is what flanneld writes for its CNI plugin.
type subnetEnv struct {
	Network string // FLANNEL_NETWORK, the whole pod network
	Subnet  string // FLANNEL_SUBNET as a network ("10.245.1.0/24")
	MTU     int    // FLANNEL_MTU
	IPMasq  bool   // FLANNEL_IPMASQ: flanneld masquerades, the bridge must not
}

func readSubnetEnv(path string) (subnetEnv, error) {
	var e subnetEnv
	fh, err := os.Open(path)
	if err != nil {
		return e, err
	}
	defer fh.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			kv[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return e, err
	}
	_, nw, err := net.ParseCIDR(kv["FLANNEL_NETWORK"])
	if err != nil {
		return e, fmt.Errorf("%s: FLANNEL_NETWORK: %w", path, err)
	}
	_, sn, err := net.ParseCIDR(kv["FLANNEL_SUBNET"])
	if err != nil {
		return e, fmt.Errorf("%s: FLANNEL_SUBNET: %w", path, err)
	}
	mtu, err := strconv.Atoi(kv["FLANNEL_MTU"])
	if err != nil || mtu < 576 {
		return e, fmt.Errorf("%s: FLANNEL_MTU %q", path, kv["FLANNEL_MTU"])
	}
	e = subnetEnv{Network: nw.String(), Subnet: sn.String(), MTU: mtu, IPMasq: kv["FLANNEL_IPMASQ"] == "true"}
	return e, nil
}

// writeFlannelConflist writes what flannel's CNI plugin delegates to, with
// the delegate settings of flannel's own manifest (hairpinMode,
// isDefaultGateway): the bridge plugin on cni0 as the pods' gateway, MTU
// and addresses from subnet.env, the flannel network routed via the
// gateway, masquerading by the bridge only when flanneld does not; then
// portmap and bandwidth. Any other conflist is removed (the runtime takes
// the first by name).
func writeFlannelConflist(n *Node, env subnetEnv, ipamDir string) error {
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "cbr0",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
				"ipMasq": !env.IPMasq, "hairpinMode": true, "mtu": env.MTU,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": env.Subnet}}},
					"routes": []map[string]string{{"dst": env.Network}}, "dataDir": ipamDir}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	ents, _ := os.ReadDir(n.CNIDir)
	for _, e := range ents {
		if e.Name() != "10-flannel.conflist" {
			_ = os.Remove(filepath.Join(n.CNIDir, e.Name()))
		}
	}
	return os.WriteFile(filepath.Join(n.CNIDir, "10-flannel.conflist"), b, 0o644)
}

// flannelManifest is the kube-flannel-ds DaemonSet and kube-flannel-cfg
// ConfigMap of flannel's kube-flannel.yml, with the net-conf.json the
// harness's flanneld runs with.
func flannelManifest(netConf []byte) cniManifest {
	return cniManifest{ns: "kube-flannel", daemonSet: "kube-flannel-ds", container: "kube-flannel",
		image:   "ghcr.io/flannel-io/flannel:" + FlannelVersion,
		labels:  map[string]string{"app": "flannel", "k8s-app": "flannel", "tier": "node"},
		command: []string{"/opt/bin/flanneld"}, args: []string{"--ip-masq", "--kube-subnet-mgr"},
		configMap: "kube-flannel-cfg", configMapFn: func() map[string]string { return map[string]string{"net-conf.json": string(netConf)} }}
}
