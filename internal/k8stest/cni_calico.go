package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// CalicoVersion is the Calico release test/k8s/build.sh builds calico-node
// and the calico CNI plugins from (its pseudo-version in the Go module
// proxy; see the script).
const CalicoVersion = "v3.31.0"

// CalicoBackends are the Calico datapaths this kernel can run: VXLAN, and
// Direct (no encapsulation; without BGP, Felix routes the other nodes'
// blocks via their node IPs).
var CalicoBackends = []string{"vxlan", "direct"}

// calicoRefused are Calico datapaths refused up front, with the reason.
var calicoRefused = map[string]string{
	"ipip": "Calico's IP-in-IP needs the kernel's ipip module (tunl0), which this kernel lacks; on a real node it is `modprobe ipip` and CALICO_IPV4POOL_IPIP=Always with BIRD (CALICO_NETWORKING_BACKEND=bird) for the routes",
	"bpf":  "Calico's eBPF dataplane needs a CGO build of calico-node with libbpf; the harness builds it static (CGO_ENABLED=0)",
}

// calicoPool is the IP pool calico-node -startup makes (the whole cluster
// CIDR; Calico hands out /26 blocks from it, not the nodes' pod CIDRs).
const calicoPool = "default-ipv4-ippool"

// Calico is real Calico as the pod network, Kubernetes datastore, no etcd
// and no BIRD: per node `calico-node -startup` once (the Node's Calico
// address, the IP pool, ClusterInformation), `-allocate-tunnel-addrs` once,
// then Felix (iptables-nft dataplane) as a supervised process in the node's
// namespace, restarted when it exits 129 to apply a changed setting, as a
// DaemonSet's kubelet would. Pods get the calico CNI plugin with
// calico-ipam, then portmap, as Calico's own manifest chains them: no
// bandwidth plugin, because Felix itself honours the
// kubernetes.io/ingress-bandwidth and egress-bandwidth annotations (and
// Calico's own qos.projectcalico.org ones) with the same qdiscs, and the
// plugin then fails every such pod's ADD ("create ingress qdisc: file
// exists"). Its credentials are its own: the calico-node and calico-cni-plugin
// ServiceAccounts, ClusterRoles and bindings of Calico's manifest, and
// tokens from the TokenRequest API, never the admin's. See
// docs/kubernetes.md for every setting and why.
type Calico struct {
	// Backend is one of CalicoBackends.
	Backend string

	nodeKubeconfig, cniKubeconfig string
	felix                         []*proc
}

// Facts name Calico, its backend, release and plugins.
func (k *Calico) Facts() CNIFacts {
	return CNIFacts{Name: "calico", Backend: k.Backend, Version: CalicoVersion, PodMTU: calicoMTU(k.Backend),
		Plugins: []string{"calico", "portmap"}}
}

// Backends are CalicoBackends.
func (k *Calico) Backends() []string { return CalicoBackends }

// calicoMTU is the pods' MTU on a backend: the node's 1500 less VXLAN's 50.
func calicoMTU(backend string) int {
	if backend == "vxlan" {
		return 1450
	}
	return 1500
}

// checkCalicoBackend refuses a backend this harness cannot run, saying why.
func checkCalicoBackend(backend string) error {
	if why, ok := calicoRefused[backend]; ok {
		return fmt.Errorf("calico backend %q refused: %s", backend, why)
	}
	if !slices.Contains(CalicoBackends, backend) {
		return fmt.Errorf("calico backend %q: this harness runs %s", backend, strings.Join(CalicoBackends, ", "))
	}
	return nil
}

// Install applies Calico's CRDs and RBAC, makes its tokens, runs startup
// and the tunnel address allocator on every node, starts Felix and writes
// each node's conflist.
func (k *Calico) Install(ctx context.Context, c *Cluster) error {
	if err := checkCalicoBackend(k.Backend); err != nil {
		return err
	}
	t0 := time.Now()
	if err := k.applyManifest(ctx, c); err != nil {
		return fmt.Errorf("calico manifest: %w", err)
	}
	var err error
	if k.nodeKubeconfig, err = serviceAccountKubeconfig(ctx, c, "kube-system", "calico-node"); err != nil {
		return fmt.Errorf("calico-node's service account: %w", err)
	}
	if k.cniKubeconfig, err = serviceAccountKubeconfig(ctx, c, "kube-system", "calico-cni-plugin"); err != nil {
		return fmt.Errorf("calico-cni-plugin's service account: %w", err)
	}
	if err := k.setFelixConfiguration(ctx, c); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := os.MkdirAll(k.dir(c, n), 0o755); err != nil {
			return err
		}
		// Pods route via 169.254.1.1, which Felix answers by proxy ARP
		// only if the node has a unicast route to it over another device;
		// the node namespaces have no default route.
		if err := run(ctx, "ip", "-n", n.NetNS, "route", "replace", "169.254.1.1/32", "dev", "eth0"); err != nil {
			return err
		}
		if err := c.runCalicoOnce(ctx, n, k.env(c, n), "-startup"); err != nil {
			return fmt.Errorf("%s: calico-node -startup: %w", n.Name, err)
		}
	}
	c.log.Info("calico startup done on every node", "took", time.Since(t0).Round(time.Millisecond))
	return k.start(ctx, c)
}

// SwitchBackend moves Calico to another backend in place: Felix stops on
// every node, the IP pool's vxlanMode and Felix's programClusterRoutes
// change, the tunnel addresses are allocated or released again, the VXLAN
// device goes, and Felix starts again; the conflists get the new MTU.
func (k *Calico) SwitchBackend(ctx context.Context, c *Cluster, backend string) error {
	if err := checkCalicoBackend(backend); err != nil {
		return err
	}
	for _, p := range k.felix {
		c.stop(p)
	}
	k.felix = nil
	k.Backend = backend
	var pool map[string]any
	if err := c.getJSON(ctx, "/apis/crd.projectcalico.org/v1/ippools/"+calicoPool, &pool); err != nil {
		return fmt.Errorf("calico IP pool: %w", err)
	}
	spec, _ := pool["spec"].(map[string]any)
	if spec == nil {
		return fmt.Errorf("calico IP pool %s has no spec", calicoPool)
	}
	spec["vxlanMode"] = calicoVXLANMode(backend)
	if err := c.apiDo(ctx, http.MethodPut, "/apis/crd.projectcalico.org/v1/ippools/"+calicoPool, pool, nil); err != nil {
		return fmt.Errorf("calico IP pool: %w", err)
	}
	if err := k.setFelixConfiguration(ctx, c); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if linkExists(ctx, n.NetNS, "vxlan.calico") {
			if err := run(ctx, "ip", "-n", n.NetNS, "link", "del", "vxlan.calico"); err != nil {
				return err
			}
		}
	}
	return k.start(ctx, c)
}

func calicoVXLANMode(backend string) string {
	if backend == "vxlan" {
		return "Always"
	}
	return "Never"
}

// start allocates (or releases) the nodes' tunnel addresses for the
// current pool, starts Felix on every node, writes the conflists and waits
// until every Felix reports ready (and, on VXLAN, has its device and a
// route to the other node's block).
func (k *Calico) start(ctx context.Context, c *Cluster) error {
	t0 := time.Now()
	bin := filepath.Join(c.BinDir, "calico-node-"+CalicoVersion)
	for _, n := range c.Nodes {
		env := k.env(c, n)
		if err := c.runCalicoOnce(ctx, n, env, "-allocate-tunnel-addrs", "-allocate-tunnel-addrs-run-once"); err != nil {
			return fmt.Errorf("%s: calico-node -allocate-tunnel-addrs: %w", n.Name, err)
		}
		argv := nsenter(n.NetNS, append(append([]string{"env"}, env...), bin, "-felix")...)
		p, err := c.startSupervised(fmt.Sprintf("%s-calico-felix-%s", n.Name, k.Backend), []int{129}, argv...)
		if err != nil {
			return err
		}
		k.felix = append(k.felix, p)
		if err := k.writeConflist(c, n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" Felix ready", 3*time.Minute, func() error {
			argv := nsenter(n.NetNS, bin, "-felix-ready")
			return run(ctx, argv[0], argv[1:]...)
		})
		if err != nil {
			return err
		}
		if k.Backend == "vxlan" {
			err := c.poll(ctx, n.Name+" Calico's VXLAN routes to the other nodes", 2*time.Minute, func() error {
				out, err := output(ctx, "ip", "-n", n.NetNS, "route", "show", "dev", "vxlan.calico")
				if err != nil {
					return err
				}
				if len(strings.Fields(out)) == 0 {
					return errors.New("no route via vxlan.calico yet")
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		c.log.Info("calico up", "node", n.Name, "backend", k.Backend, "mtu", calicoMTU(k.Backend), "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// dir is the node's own Calico state (the nodes share one file system).
func (k *Calico) dir(c *Cluster, n *Node) string { return filepath.Join(c.RunDir, n.Name, "calico") }

// env is calico-node's environment on node n (startup, the allocator and
// Felix read it): the Kubernetes datastore through calico-node's own
// token, the node's name and address, the pool for the backend, and the
// per-node paths and settings K8S-FACTS found necessary.
func (k *Calico) env(c *Cluster, n *Node) []string {
	dir := k.dir(c, n)
	return []string{
		"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + k.nodeKubeconfig, "CLUSTER_TYPE=k8s,cnperf-harness",
		"NODENAME=" + n.Name, "CALICO_NODENAME_FILE=" + filepath.Join(dir, "nodename"),
		"IP=" + n.IP + "/24", "IP6=none", "CALICO_NETWORKING_BACKEND=vxlan",
		"CALICO_IPV4POOL_CIDR=" + clusterCIDR, "CALICO_IPV4POOL_VXLAN=" + calicoVXLANMode(k.Backend),
		"CALICO_IPV4POOL_IPIP=Never", "CALICO_IPV4POOL_NAT_OUTGOING=true", "WAIT_FOR_DATASTORE=true",
		"FELIX_DATASTORETYPE=kubernetes", "FELIX_FELIXHOSTNAME=" + n.Name,
		// A CGO-off Felix panics in the connect-time load balancer's
		// clean-up ("LIBBPF syscall stub") even in iptables mode.
		"FELIX_DebugSkipCTLBCleanup=true",
		"FELIX_IPTABLESBACKEND=nft", "FELIX_MTUIFACEPATTERN=^eth0$", "FELIX_IPV6SUPPORT=false",
		"FELIX_USAGEREPORTINGENABLED=false", "FELIX_HEALTHENABLED=true", "FELIX_LOGFILEPATH=none",
		"FELIX_LOGSEVERITYSCREEN=info", "FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT",
		"FELIX_ENDPOINTSTATUSPATHPREFIX=" + filepath.Join(dir, "status"),
	}
}

// runCalicoOnce runs a one-shot calico-node command in node n's namespace
// with env.
func (c *Cluster) runCalicoOnce(ctx context.Context, n *Node, env []string, args ...string) error {
	argv := nsenter(n.NetNS, append(append([]string{"env"}, env...), filepath.Join(c.BinDir, "calico-node-"+CalicoVersion))...)
	return run(ctx, argv[0], append(argv[1:], args...)...)
}

// setFelixConfiguration writes the cluster's FelixConfiguration "default":
// on Direct, Felix programs the routes to the other nodes' blocks itself
// (there is no BIRD to do it).
func (k *Calico) setFelixConfiguration(ctx context.Context, c *Cluster) error {
	routes := "Disabled"
	if k.Backend == "direct" {
		routes = "Enabled"
	}
	path := "/apis/crd.projectcalico.org/v1/felixconfigurations"
	var fc map[string]any
	if err := c.getJSON(ctx, path+"/default", &fc); err != nil {
		fc = map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "FelixConfiguration",
			"metadata": map[string]any{"name": "default"}, "spec": map[string]any{}}
		spec := fc["spec"].(map[string]any)
		spec["programClusterRoutes"] = routes
		if err := c.apiDo(ctx, http.MethodPost, path, fc, nil); err != nil {
			return fmt.Errorf("felix configuration: %w", err)
		}
		return nil
	}
	spec, _ := fc["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
		fc["spec"] = spec
	}
	spec["programClusterRoutes"] = routes
	if err := c.apiDo(ctx, http.MethodPut, path+"/default", fc, nil); err != nil {
		return fmt.Errorf("felix configuration: %w", err)
	}
	return nil
}

// calicoKinds are the objects of Calico's manifest the harness applies,
// with their API paths: the CRDs, and the ServiceAccounts, ClusterRoles and
// bindings of calico-node and the CNI plugin (not kube-controllers, which
// the harness does not run).
var calicoKinds = map[string]string{
	"CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
	"ServiceAccount":           "/api/v1/namespaces/%s/serviceaccounts",
	"ClusterRole":              "/apis/rbac.authorization.k8s.io/v1/clusterroles",
	"ClusterRoleBinding":       "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}

// calicoObjects picks from Calico's manifest the objects calicoKinds name,
// with their API paths.
func calicoObjects(manifest []byte) (paths []string, objs []map[string]any, err error) {
	for i, doc := range bytes.Split(manifest, []byte("\n---")) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		kind, _ := o["kind"].(string)
		meta, _ := o["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		path, ok := calicoKinds[kind]
		if !ok || strings.HasPrefix(name, "calico-kube-controllers") {
			continue
		}
		if strings.Contains(path, "%s") {
			ns, _ := meta["namespace"].(string)
			if ns == "" {
				return nil, nil, fmt.Errorf("%s %s has no namespace", kind, name)
			}
			path = fmt.Sprintf(path, ns)
		}
		paths, objs = append(paths, path), append(objs, o)
	}
	return paths, objs, nil
}

// applyManifest creates the CRDs, ServiceAccounts and RBAC of Calico's
// manifest (as copied by build.sh) and waits until the CRDs serve.
func (k *Calico) applyManifest(ctx context.Context, c *Cluster) error {
	b, err := os.ReadFile(filepath.Join(c.BinDir, "calico-"+CalicoVersion+".yaml"))
	if err != nil {
		return err
	}
	paths, objs, err := calicoObjects(b)
	if err != nil {
		return err
	}
	for i, o := range objs {
		if err := c.apiDo(ctx, http.MethodPost, paths[i], o, nil); err != nil {
			return err
		}
	}
	return c.poll(ctx, "Calico's CRDs served", time.Minute, func() error {
		for _, r := range []string{"ippools", "felixconfigurations", "ipamblocks", "clusterinformations"} {
			if err := c.getJSON(ctx, "/apis/crd.projectcalico.org/v1/"+r, &json.RawMessage{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// serviceAccountKubeconfig writes a kubeconfig with a 24 h token of the
// service account from the TokenRequest API.
func serviceAccountKubeconfig(ctx context.Context, c *Cluster, ns, name string) (string, error) {
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	err := c.apiDo(ctx, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts/"+name+"/token", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{"expirationSeconds": 24 * 3600}}, &tr)
	if err != nil {
		return "", err
	}
	if tr.Status.Token == "" {
		return "", errors.New("TokenRequest returned no token")
	}
	return c.UserKubeconfig(name, tr.Status.Token)
}

// writeConflist writes the node's CNI configuration as Calico's manifest
// does (calico with calico-ipam, portmap) with the per-node
// names and paths the nodes need on one file system, and the backend's MTU.
// Any other conflist is removed (the runtime takes the first by name).
func (k *Calico) writeConflist(c *Cluster, n *Node) error {
	dir := k.dir(c, n)
	b := calicoConflist(n.Name, dir, k.cniKubeconfig, calicoMTU(k.Backend))
	ents, _ := os.ReadDir(n.CNIDir)
	for _, e := range ents {
		if e.Name() != "10-calico.conflist" {
			_ = os.Remove(filepath.Join(n.CNIDir, e.Name()))
		}
	}
	return os.WriteFile(filepath.Join(n.CNIDir, "10-calico.conflist"), b, 0o644)
}

func calicoConflist(node, dir, kubeconfig string, mtu int) []byte {
	conf := map[string]any{
		"cniVersion": "0.3.1", "name": "k8s-pod-network",
		"plugins": []any{
			map[string]any{"type": "calico", "datastore_type": "kubernetes", "log_level": "info",
				"log_file_path": filepath.Join(dir, "cni.log"), "nodename": node, "nodename_file": filepath.Join(dir, "nodename"),
				"ipam_lock_file": filepath.Join(dir, "ipam.lock"), "endpoint_status_dir": filepath.Join(dir, "status", "endpoint-status"),
				"mtu": mtu, "ipam": map[string]any{"type": "calico-ipam"}, "policy": map[string]any{"type": "k8s"},
				"kubernetes": map[string]any{"kubeconfig": kubeconfig}},
			map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return b
}
