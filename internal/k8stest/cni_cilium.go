package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// CiliumVersion is the Cilium release test/k8s/build.sh builds the agent
// and cilium-cni from (CILIUM_VERSION; the Go module's own tag).
const CiliumVersion = "v1.20.2"

// CiliumBackends are Cilium's routing modes the harness runs: tunnel with
// VXLAN (port 8472), and native routing (pod CIDRs routed unencapsulated,
// --auto-direct-node-routes installing the routes to the other nodes'
// pod CIDRs via their node IPs).
var CiliumBackends = []string{"vxlan", "native"}

// ciliumRefused are Cilium modes refused up front, with the reason.
var ciliumRefused = map[string]string{
	"geneve":    "Cilium's geneve tunnel needs the kernel's geneve module, which this kernel lacks; on a real node it is --tunnel-protocol=geneve",
	"wireguard": "Cilium's transparent encryption with WireGuard needs the kernel's wireguard module, which this kernel lacks",
}

// ciliumMaskedSysctls are the host-wide settings the agent writes that
// must not change on the shared machine: unprivileged_bpf_disabled=1 cannot
// be undone until a reboot, timer_migration=0 changes the whole machine.
// Each agent runs in a mount namespace of its own where these files are
// per-node copies.
var ciliumMaskedSysctls = []string{"kernel/unprivileged_bpf_disabled", "kernel/timer_migration"}

// Cilium is real Cilium as the pod network, without its operator (which
// does not build from the Go module): per node one cilium-agent as a
// supervised process in the node's network namespace and in a mount
// namespace of its own (its bpffs at --bpf-root, its cgroup2 mount, and
// the two host-wide sysctls it writes masked), with its own --state-dir and
// --socket-path, compiling its BPF programs at start with clang and llc
// from the module's bpf/ sources (--lib-dir). IPAM is "kubernetes" (the
// Node's spec.podCIDR), identities are CRDs, and the CRDs come from the
// module, applied by the harness as the operator would. The CNI plugin
// cilium-cni finds its node's agent through CILIUM_SOCK in its containerd's
// environment; the conflist chains the bandwidth plugin (the
// kubernetes.io/*-bandwidth annotations) and portmap after it. Its
// credentials are its own: the cilium ServiceAccount with the rules of
// Cilium's chart's ClusterRole and a token from the TokenRequest API.
// Facts: docs/kubernetes.md and ../shared/K8S-FACTS.md.
type Cilium struct {
	// Backend is one of CiliumBackends.
	Backend string

	kubeconfig string
	agents     []*proc
}

// Facts name Cilium, its backend, release and plugins. The pods' MTU is
// not checked: Cilium keeps the veth at the device's MTU and lowers the
// pods' routes for VXLAN, so the veth MTU the inspector reads says nothing
// about the mode.
func (k *Cilium) Facts() CNIFacts {
	return CNIFacts{Name: "cilium", Backend: k.Backend, Version: CiliumVersion, Plugins: []string{"cilium-cni", "bandwidth", "portmap"}}
}

// Backends are CiliumBackends.
func (k *Cilium) Backends() []string { return CiliumBackends }

// checkCiliumBackend refuses a mode this harness cannot run, saying why.
func checkCiliumBackend(backend string) error {
	if why, ok := ciliumRefused[backend]; ok {
		return fmt.Errorf("cilium backend %q refused: %s", backend, why)
	}
	if !slices.Contains(CiliumBackends, backend) {
		return fmt.Errorf("cilium backend %q: this harness runs %s", backend, strings.Join(CiliumBackends, ", "))
	}
	return nil
}

// RuntimeEnv is what each node's containerd (and so the CNI plugins it
// runs) needs in its environment: the node's agent socket.
func (k *Cilium) RuntimeEnv(c *Cluster, n *Node) []string {
	return []string{"CILIUM_SOCK=" + k.socket(c, n)}
}

// Install applies Cilium's CRDs and RBAC, makes its token, prepares each
// node's mount namespace and starts the agents.
func (k *Cilium) Install(ctx context.Context, c *Cluster) error {
	if err := checkCiliumBackend(k.Backend); err != nil {
		return err
	}
	if err := k.applyCRDs(ctx, c); err != nil {
		return fmt.Errorf("cilium CRDs: %w", err)
	}
	if err := ciliumRBAC(ctx, c); err != nil {
		return fmt.Errorf("cilium RBAC: %w", err)
	}
	var err error
	if k.kubeconfig, err = serviceAccountKubeconfig(ctx, c, "kube-system", "cilium"); err != nil {
		return fmt.Errorf("cilium's service account: %w", err)
	}
	if err := k.toolDir(c); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := k.mountNamespace(ctx, c, n); err != nil {
			return fmt.Errorf("%s: cilium's mount namespace: %w", n.Name, err)
		}
	}
	// Pods keep their addresses towards the API server (no masquerading):
	// its namespace routes each node's pod CIDR via the node (the first
	// run without it: every TokenReview from the server pod timed out).
	if err := c.routeRootToPods(ctx); err != nil {
		return err
	}
	return k.start(ctx, c)
}

// SwitchBackend stops the agents, removes the old mode's devices and
// routes, and starts the agents again in the new mode (endpoints are
// restored from their state dirs; the caller recreates the pods).
func (k *Cilium) SwitchBackend(ctx context.Context, c *Cluster, backend string) error {
	if err := checkCiliumBackend(backend); err != nil {
		return err
	}
	for _, p := range k.agents {
		c.stop(p)
	}
	k.agents = nil
	for _, n := range c.Nodes {
		if linkExists(ctx, n.NetNS, "cilium_vxlan") {
			if err := run(ctx, "ip", "-n", n.NetNS, "link", "del", "cilium_vxlan"); err != nil {
				return err
			}
		}
		for _, m := range c.Nodes {
			if m != n && k.Backend == "native" {
				_ = run(ctx, "ip", "-n", n.NetNS, "route", "del", m.PodCIDR) // auto-direct-node-routes'
			}
		}
	}
	k.Backend = backend
	return k.start(ctx, c)
}

func (k *Cilium) dir(c *Cluster, n *Node) string { return filepath.Join(c.RunDir, n.Name, "cilium") }

func (k *Cilium) socket(c *Cluster, n *Node) string {
	return filepath.Join(k.dir(c, n), "run", "cilium.sock")
}

func (k *Cilium) mountNS(c *Cluster, n *Node) string {
	return filepath.Join(k.dir(c, n), "ns", "mnt")
}

// toolDir holds clang and llc as the agent calls them: Debian's clang-19
// and llc-19 (scripts/install-test-deps.sh cilium).
func (k *Cilium) toolDir(c *Cluster) error {
	dir := filepath.Join(c.RunDir, "cilium-tools")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, want := range map[string]string{"clang": "clang-19", "llc": "llc-19"} {
		p, err := exec.LookPath(want)
		if err != nil {
			return fmt.Errorf("cilium compiles its BPF programs with %s: %w (scripts/install-test-deps.sh cilium installs it)", want, err)
		}
		_ = os.Remove(filepath.Join(dir, name))
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// mountNamespace makes node n's persistent mount namespace for its agent
// (bound to a file, as ip netns binds network namespaces): its bpffs, and
// per-node copies over the sysctls the agent must not change host-wide.
// Everything is under the run directory, which Cleanup unmounts.
func (k *Cilium) mountNamespace(ctx context.Context, c *Cluster, n *Node) error {
	dir := k.dir(c, n)
	nsDir := filepath.Dir(k.mountNS(c, n))
	for _, d := range []string{nsDir, filepath.Join(dir, "bpffs"), filepath.Join(dir, "run"), filepath.Join(dir, "cgroupv2"), filepath.Join(dir, "sysctl")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// A mount namespace can be bound only onto a mount that is not shared.
	if err := run(ctx, "mount", "--bind", nsDir, nsDir); err != nil {
		return err
	}
	if err := run(ctx, "mount", "--make-private", nsDir); err != nil {
		return err
	}
	if err := os.WriteFile(k.mountNS(c, n), nil, 0o644); err != nil {
		return err
	}
	if err := run(ctx, "unshare", "--mount="+k.mountNS(c, n), "--propagation", "private", "true"); err != nil {
		return err
	}
	in := func(args ...string) error {
		return run(ctx, "nsenter", append([]string{"--mount=" + k.mountNS(c, n), "--"}, args...)...)
	}
	if err := in("mount", "-t", "bpf", "bpf", filepath.Join(dir, "bpffs")); err != nil {
		return err
	}
	for _, s := range ciliumMaskedSysctls {
		host := filepath.Join("/proc/sys", s)
		cur, err := os.ReadFile(host)
		if err != nil {
			return err
		}
		copyPath := filepath.Join(dir, "sysctl", strings.ReplaceAll(s, "/", "."))
		if err := os.WriteFile(copyPath, cur, 0o644); err != nil {
			return err
		}
		if err := in("mount", "--bind", copyPath, host); err != nil {
			return err
		}
	}
	return nil
}

// args are the agent's flags on node n for the current backend.
func (k *Cilium) args(c *Cluster, n *Node) []string {
	dir := k.dir(c, n)
	a := []string{
		"--k8s-kubeconfig-path=" + k.kubeconfig, "--k8s-namespace=kube-system", "--cluster-name=default",
		"--ipam=kubernetes", "--identity-allocation-mode=crd",
		"--enable-ipv4=true", "--enable-ipv6=false", "--devices=eth0",
		"--bpf-root=" + filepath.Join(dir, "bpffs"), "--cgroup-root=" + filepath.Join(dir, "cgroupv2"),
		"--state-dir=" + filepath.Join(dir, "run"), "--socket-path=" + k.socket(c, n),
		"--lib-dir=" + filepath.Join(c.BinDir, "cilium-"+CiliumVersion),
		// Two agents share one kernel and one cgroup2: no socket-level
		// load balancing, kube-proxy stays.
		"--bpf-lb-sock=false", "--kube-proxy-replacement=false",
		"--enable-l7-proxy=false", "--enable-hubble=false", "--enable-gops=false",
		"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
		"--cni-exclusive=false", "--enable-ipv4-masquerade=false",
	}
	cfg := ciliumModeConfig(k.Backend)
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		a = append(a, "--"+key+"="+cfg[key])
	}
	return a
}

// ciliumModeConfig is the agent's configuration of a routing mode: its
// flags here, and cilium-config's keys (ciliumManifest).
func ciliumModeConfig(backend string) map[string]string {
	if backend == "vxlan" {
		return map[string]string{"routing-mode": "tunnel", "tunnel-protocol": "vxlan", "tunnel-port": "8472"}
	}
	return map[string]string{"routing-mode": "native", "auto-direct-node-routes": "true", "ipv4-native-routing-cidr": clusterCIDR}
}

// ciliumManifest is the cilium DaemonSet and cilium-config ConfigMap of
// Cilium's chart (the agent reads the ConfigMap with --config-dir), with
// the running mode's keys.
func (k *Cilium) ciliumManifest() cniManifest {
	return cniManifest{ns: "kube-system", daemonSet: "cilium", container: "cilium-agent",
		image:   "quay.io/cilium/cilium:" + CiliumVersion,
		labels:  map[string]string{"k8s-app": "cilium", "app.kubernetes.io/name": "cilium-agent", "app.kubernetes.io/part-of": "cilium"},
		command: []string{"cilium-agent"}, args: []string{"--config-dir=/tmp/cilium/config-map"},
		configMap: "cilium-config", configMapFn: func() map[string]string { return ciliumModeConfig(k.Backend) }}
}

// ciliumMonitorSocket is where every cilium-agent binds its monitor
// socket: a path compiled into the agent (defaults.MonitorSockPath1_2
// under defaults.RuntimePath), not under --state-dir, and the agents' mount
// namespaces share /var/run with the host. An agent removes the file
// there and then binds: two agents starting at once can both remove
// before either binds, and the later bind fails ("address already in
// use"; the agent exits). So the agents start one at a time, each once
// the previous one's socket is there, as the kubelets do with theirs
// (kubeletSocket); the sockets an earlier agent left are removed first.
const ciliumMonitorSocket = "/var/run/cilium/monitor1_2.sock"

// removeStaleSockets removes the unix sockets at paths that a process
// which has exited left. A missing path is fine; a path that is there but
// not a socket is refused, not removed: it is not a socket's file.
func removeStaleSockets(paths ...string) error {
	var errs []error
	for _, p := range paths {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case fi.Mode().Type() != fs.ModeSocket:
			errs = append(errs, fmt.Errorf("%s is a %v, not a stale socket: not removed", p, fi.Mode().Type()))
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove the stale socket %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// isSocket says whether a unix socket file is at path.
func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// start starts the agent on every node, writes the conflists and waits
// until every agent says it is healthy and has its datapath to the other
// node (the VXLAN device, or the direct routes).
func (k *Cilium) start(ctx context.Context, c *Cluster) error {
	t0 := time.Now()
	if err := k.ciliumManifest().apply(ctx, c); err != nil {
		return fmt.Errorf("cilium's DaemonSet and ConfigMap: %w", err)
	}
	bin := filepath.Join(c.BinDir, "cilium-agent-"+CiliumVersion)
	path := filepath.Join(c.RunDir, "cilium-tools") + ":" + os.Getenv("PATH") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
	for i, n := range c.Nodes {
		// The sockets of an agent that ran before (the other mode's, or a
		// crashed run's; its process has exited: SwitchBackend waits). For
		// the second node this also unlinks the first agent's monitor
		// socket, as that agent's own start would: nothing here uses the
		// monitor.
		if err := removeStaleSockets(ciliumMonitorSocket, k.socket(c, n)); err != nil {
			return fmt.Errorf("%s: before its cilium-agent starts: %w", n.Name, err)
		}
		argv := append([]string{"nsenter", "--net=/var/run/netns/" + n.NetNS, "--mount=" + k.mountNS(c, n), "--", bin}, k.args(c, n)...)
		env := []string{"PATH=" + path, "K8S_NODE_NAME=" + n.Name, "CILIUM_K8S_NAMESPACE=kube-system"}
		p, err := c.startSupervisedEnv(fmt.Sprintf("%s-cilium-agent-%s", n.Name, k.Backend), nil, env, argv...)
		if err != nil {
			return err
		}
		k.agents = append(k.agents, p)
		if err := k.writeConflist(c, n); err != nil {
			return err
		}
		if i == len(c.Nodes)-1 {
			continue
		}
		// The next agent starts once this one has bound the shared monitor
		// socket (or is healthy without it).
		err = c.poll(ctx, n.Name+" cilium-agent's monitor socket bound", 6*time.Minute, func() error {
			if isSocket(ciliumMonitorSocket) {
				return nil
			}
			if err := ciliumHealthy(ctx, k.socket(c, n)); err != nil {
				return fmt.Errorf("no %s yet, and not healthy: %w", ciliumMonitorSocket, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" cilium-agent healthy", 6*time.Minute, func() error {
			return ciliumHealthy(ctx, k.socket(c, n))
		})
		if err != nil {
			return err
		}
		err = c.poll(ctx, n.Name+" Cilium's "+k.Backend+" datapath to the other nodes", 2*time.Minute, func() error {
			if k.Backend == "vxlan" {
				if !linkExists(ctx, n.NetNS, "cilium_vxlan") {
					return errors.New("no cilium_vxlan device yet")
				}
				return nil
			}
			for _, m := range c.Nodes {
				if m == n {
					continue
				}
				out, err := output(ctx, "ip", "-n", n.NetNS, "route", "show", m.PodCIDR)
				if err != nil {
					return err
				}
				if !strings.Contains(out, "via "+m.IP) {
					return fmt.Errorf("no route to %s's pods via %s yet (%q)", m.Name, m.IP, strings.TrimSpace(out))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		c.log.Info("cilium up", "node", n.Name, "backend", k.Backend, "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// ciliumHealthy asks the agent's API on its unix socket for /v1/healthz
// and wants its own state "Ok".
func ciliumHealthy(ctx context.Context, sock string) error {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cilium/v1/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Cilium struct {
			State string `json:"state"`
			Msg   string `json:"msg"`
		} `json:"cilium"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("healthz: HTTP %d: %w", resp.StatusCode, err)
	}
	if st.Cilium.State != "Ok" {
		return fmt.Errorf("cilium state %q: %s", st.Cilium.State, st.Cilium.Msg)
	}
	return nil
}

// writeConflist writes node n's CNI configuration, as Cilium's chart
// writes it (cilium-cni, its log in the node's own directory), with the
// bandwidth plugin and portmap chained; other conflists are removed (the
// runtime takes the first by name).
func (k *Cilium) writeConflist(c *Cluster, n *Node) error {
	ents, _ := os.ReadDir(n.CNIDir)
	for _, e := range ents {
		if e.Name() != "05-cilium.conflist" {
			_ = os.Remove(filepath.Join(n.CNIDir, e.Name()))
		}
	}
	return os.WriteFile(filepath.Join(n.CNIDir, "05-cilium.conflist"), ciliumConflist(filepath.Join(k.dir(c, n), "cni.log")), 0o644)
}

func ciliumConflist(logFile string) []byte {
	conf := map[string]any{
		"cniVersion": "0.3.1", "name": "cilium",
		"plugins": []any{
			map[string]any{"type": "cilium-cni", "enable-debug": false, "log-file": logFile},
			map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
			map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return b
}

// applyCRDs creates the v2 and v2alpha1 CRDs from Cilium's module (copied
// by build.sh), as the operator would, and waits until the ones the agent
// needs serve.
func (k *Cilium) applyCRDs(ctx context.Context, c *Cluster) error {
	root := filepath.Join(c.BinDir, "cilium-"+CiliumVersion, "crds")
	var files []string
	for _, v := range []string{"v2", "v2alpha1"} {
		m, err := filepath.Glob(filepath.Join(root, v, "*.yaml"))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		return fmt.Errorf("only %d CRDs under %s (build.sh copies them from the module)", len(files), root)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var o map[string]any
		if err := yaml.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := c.apiDo(ctx, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", o, nil); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
	}
	return c.poll(ctx, "Cilium's CRDs served", time.Minute, func() error {
		for _, r := range []string{"v2/ciliumnodes", "v2/ciliumidentities", "v2/ciliumendpoints", "v2alpha1/ciliumendpointslices"} {
			if err := c.getJSON(ctx, "/apis/cilium.io/"+r, &json.RawMessage{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// ciliumRules are the rules of Cilium's chart's agent ClusterRole
// (install/kubernetes/cilium/templates/cilium-agent/clusterrole.yaml) for
// the settings the harness uses: no secrets, no node annotations, no L2
// announcements.
var ciliumRules = []any{
	rule("networking.k8s.io", []string{"networkpolicies"}, "get", "list", "watch"),
	rule("discovery.k8s.io", []string{"endpointslices"}, "get", "list", "watch"),
	rule("", []string{"namespaces", "services", "pods", "nodes"}, "get", "list", "watch"),
	rule("apiextensions.k8s.io", []string{"customresourcedefinitions"}, "list", "watch", "get"),
	rule("cilium.io", []string{"ciliumloadbalancerippools", "ciliumbgpnodeconfigs", "ciliumbgpadvertisements", "ciliumbgppeerconfigs",
		"ciliumclusterwideenvoyconfigs", "ciliumclusterwidenetworkpolicies", "ciliumegressgatewaypolicies", "ciliumendpoints",
		"ciliumendpointslices", "ciliumenvoyconfigs", "ciliumidentities", "ciliumlocalredirectpolicies", "ciliumnetworkpolicies",
		"ciliumnodes", "ciliumnodeconfigs", "ciliumcidrgroups", "ciliuml2announcementpolicies", "ciliumpodippools", "ciliumdatapathplugins"}, "list", "watch"),
	rule("cilium.io", []string{"ciliumidentities", "ciliumendpoints", "ciliumnodes"}, "create"),
	rule("cilium.io", []string{"ciliumidentities"}, "update"),
	rule("cilium.io", []string{"ciliumendpoints"}, "delete", "get"),
	rule("cilium.io", []string{"ciliumnodes", "ciliumnodes/status"}, "get", "update"),
	rule("cilium.io", []string{"ciliumendpoints/status", "ciliumendpoints", "ciliuml2announcementpolicies/status", "ciliumbgpnodeconfigs/status"}, "patch"),
}

func rule(group string, resources []string, verbs ...string) map[string]any {
	return map[string]any{"apiGroups": []string{group}, "resources": resources, "verbs": verbs}
}

// ciliumRBAC makes the cilium ServiceAccount in kube-system, its
// ClusterRole and the binding.
func ciliumRBAC(ctx context.Context, c *Cluster) error {
	objs := []struct {
		path string
		body map[string]any
	}{
		{"/api/v1/namespaces/kube-system/serviceaccounts", map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "cilium", "namespace": "kube-system"}}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "cilium"}, "rules": ciliumRules}},
		// The chart's Role cilium-config-agent: the agent watches its
		// ConfigMap (the harness gives flags instead; without the Role it
		// logs a forbidden error every few seconds).
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": map[string]any{"name": "cilium-config-agent", "namespace": "kube-system"},
			"rules": []any{rule("", []string{"configmaps"}, "get", "list", "watch")}}},
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": map[string]any{"name": "cilium-config-agent", "namespace": "kube-system"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cilium-config-agent"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "cilium", "namespace": "kube-system"}}}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "cilium"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cilium"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "cilium", "namespace": "kube-system"}}}},
	}
	for _, o := range objs {
		if err := c.apiDo(ctx, http.MethodPost, o.path, o.body, nil); err != nil {
			return err
		}
	}
	return nil
}
