package k8stest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Addresses and names of the harness cluster. They start with "kcn" (the
// team's rule: the Kubernetes area's namespaces start with "k").
const (
	prefix       = "kcn"
	underlayNS   = "kcn-ul"
	rootVeth     = "kcn-root"
	apiIP        = "10.250.0.1"
	apiPort      = "16443"
	etcdClient   = "127.0.0.1:23790"
	etcdPeer     = "127.0.0.1:23800"
	serviceCIDR  = "10.97.0.0/16"
	serviceIP    = "10.97.0.1"
	clusterCIDR  = "10.245.0.0/16"
	nodeNet      = "10.250.0.0/24"
	sandboxImage = "localhost/pause:harness"
)

// kubeletSysctls are the host-wide settings kubelet changes; Up saves them
// and Down restores them.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Options configure the cluster.
type Options struct {
	// CacheDir holds the built binaries (test/k8s/build.sh) and the run
	// state (CacheDir/run, removed by Down).
	CacheDir string
	// BuildScript builds the binaries into CacheDir; it prints the bin dir.
	BuildScript string
	// Images are tarballs (docker-save or OCI) imported into every node.
	Images []string
	// Nodes is the number of nodes (default 2).
	Nodes int
	Log   *slog.Logger
}

// Node is one kubelet's node.
type Node struct {
	Name    string
	NetNS   string // name under /var/run/netns
	IP      string
	CNIDir  string // its CNI configuration directory
	Socket  string // its containerd socket
	PodCIDR string
}

// Cluster is a running cluster.
type Cluster struct {
	opts       Options
	BinDir     string
	RunDir     string
	SockDir    string
	Kubeconfig string // admin kubeconfig
	Server     string // https://10.250.0.1:16443
	Nodes      []*Node
	procs      []*proc
	log        *slog.Logger
	caPool     *x509.CertPool
	adminToken string
	// CNIConfDir is where inspector pods find a node's CNI configuration:
	// the nodes' configuration directories share this parent layout.
	CNIConfDir func(node string) string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// Up builds (or finds) the binaries, removes leftovers of an earlier run,
// and starts the cluster. On error everything it made is removed again.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c = &Cluster{opts: o, log: o.Log,
		RunDir: filepath.Join(o.CacheDir, "run"), SockDir: "/run/cnperf-k8s",
		Server: "https://" + apiIP + ":" + apiPort}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := Cleanup(o.CacheDir, c.log); err != nil {
		return nil, fmt.Errorf("leftovers of an earlier run: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Down())
			c = nil
		}
	}()
	bin, err := c.build(ctx)
	if err != nil {
		return c, err
	}
	c.BinDir = bin
	for _, d := range []string{c.RunDir, c.SockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
	}
	if err := saveSysctls(filepath.Join(c.RunDir, "sysctls.json")); err != nil {
		return c, err
	}
	for i := 1; i <= o.Nodes; i++ {
		name := fmt.Sprintf("%s-node%d", prefix, i)
		c.Nodes = append(c.Nodes, &Node{Name: name, NetNS: name, IP: fmt.Sprintf("10.250.0.%d", 10+i),
			CNIDir: filepath.Join(c.RunDir, name, "cni"), Socket: filepath.Join(c.SockDir, name, "containerd.sock")})
	}
	c.CNIConfDir = func(node string) string { return filepath.Join(c.RunDir, node, "cni") }
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"network", c.network},
		{"certificates", c.pki},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controller-manager and scheduler", c.startControllers},
		{"containerd", c.startContainerds},
		{"images", c.importImages},
		{"kubelets", c.startKubelets},
		{"pod networks", c.podNetworks},
		{"kube-proxy", c.startProxies},
		{"nodes ready", c.waitNodesReady},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("cluster %s: %w%s", s.name, err, c.exited())
		}
		c.log.Info("cluster step done", "step", s.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// Preflight checks that the tools the cluster needs are there.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (namespaces, cgroups, containerd)")
	}
	var missing []string
	for _, t := range []string{"etcd", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "nsenter", "ip", "sysctl"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: apt-get install -y etcd-server containerd runc iptables util-linux iproute2 procps (scripts/install-test-deps.sh does)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		return errors.New("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory: this harness is written for the hybrid cgroup layout of the CI machine")
	}
	return nil
}

func (c *Cluster) build(ctx context.Context) (string, error) {
	bctx, cancel := context.WithTimeout(ctx, 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, "nice", "-n", "10", c.opts.BuildScript, c.opts.CacheDir)
	cmd.Env = os.Environ()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build Kubernetes: %w\n%s", err, tail(errb.String(), 3000))
	}
	c.log.Info("kubernetes binaries ready", "took", time.Since(start).Round(time.Second))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// run runs a short command and returns its error with its output.
func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = pathEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

func pathEnv() []string {
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(env, "PATH="+os.Getenv("PATH")+":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin")
}

func nsenter(ns string, args ...string) []string {
	return append([]string{"nsenter", "--net=/var/run/netns/" + ns, "--"}, args...)
}

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

// start starts a long-running component with its output in a log file.
func (c *Cluster) start(name string, argv ...string) (*proc, error) {
	logDir := filepath.Join(c.RunDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = pathEnv()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	pf, err := os.OpenFile(filepath.Join(c.RunDir, "pids"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(pf, "%d %s\n", cmd.Process.Pid, argv0(argv))
		pf.Close()
	}
	return p, nil
}

// argv0 is the program a process runs (after nsenter's arguments).
func argv0(argv []string) string {
	if argv[0] == "nsenter" {
		for i, a := range argv {
			if a == "--" && i+1 < len(argv) {
				return argv[i+1]
			}
		}
	}
	return argv[0]
}

// exited lists components that died, with the end of their logs.
func (c *Cluster) exited() string {
	var b strings.Builder
	for _, p := range c.procs {
		select {
		case <-p.done:
			data, _ := os.ReadFile(p.log)
			fmt.Fprintf(&b, "\n--- %s exited (%v); end of its log:\n%s", p.name, p.err, tail(string(data), 2500))
		default:
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// poll calls fn every interval until it returns nil, ctx ends or timeout
// passes; the error then carries fn's last error.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = fn(); last == nil {
			return nil
		}
		if x := c.exited(); x != "" {
			return fmt.Errorf("%s: %v%s", what, last, x)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %v: %v", what, timeout, last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	dir := filepath.Join(c.RunDir, "etcd")
	_, err := c.start("etcd", "etcd", "--name", "kcn", "--data-dir", dir,
		"--listen-client-urls", "http://"+etcdClient, "--advertise-client-urls", "http://"+etcdClient,
		"--listen-peer-urls", "http://"+etcdPeer, "--initial-advertise-peer-urls", "http://"+etcdPeer,
		"--initial-cluster", "kcn=http://"+etcdPeer, "--log-level", "warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.poll(ctx, "etcd healthy", time.Minute, func() error {
		resp, err := hc.Get("http://" + etcdClient + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"health":"true"`) {
			return fmt.Errorf("etcd says %s", b)
		}
		return nil
	})
}

func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.RunDir, "pki", name) }

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p := c.pkiPath
	_, err := c.start("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"),
		"--advertise-address="+apiIP, "--bind-address="+apiIP, "--secure-port="+apiPort,
		"--etcd-servers=http://"+etcdClient,
		"--service-cluster-ip-range="+serviceCIDR,
		"--token-auth-file="+p("tokens.csv"), "--client-ca-file="+p("ca.crt"),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--kubelet-client-certificate="+p("kubelet-client.crt"), "--kubelet-client-key="+p("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--allow-privileged=true", "--profiling=false", "--enable-priority-and-fairness=false",
		"--cert-dir="+filepath.Join(c.RunDir, "apiserver"), "--v=1")
	if err != nil {
		return err
	}
	hc := c.httpClient()
	return c.poll(ctx, "kube-apiserver ready", 3*time.Minute, func() error {
		req, _ := http.NewRequest(http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, tail(string(b), 300))
		}
		return nil
	})
}

func (c *Cluster) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.caPool}}}
}

func (c *Cluster) startControllers(ctx context.Context) error {
	_, err := c.start("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfigPath("controller-manager"), "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-private-key-file="+c.pkiPath("sa.key"), "--root-ca-file="+c.pkiPath("ca.crt"),
		"--use-service-account-credentials=false", "--v=1")
	if err != nil {
		return err
	}
	_, err = c.start("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
		"--kubeconfig="+c.kubeconfigPath("scheduler"), "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0", "--v=1")
	return err
}

// cgroupHierarchies are the v1 hierarchies kubelet's cgroupfs driver uses.
func cgroupHierarchies() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

func makeCgroupRoot(name string) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" || strings.Contains(filepath.Base(h), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s/%s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}

func (c *Cluster) startContainerds(ctx context.Context) error {
	for _, n := range c.Nodes {
		dir := filepath.Join(c.RunDir, n.Name)
		sock := filepath.Dir(n.Socket)
		for _, d := range []string{dir, sock, n.CNIDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd"), filepath.Join(sock, "state"), n.Socket, n.Socket+".ttrpc",
			filepath.Join(dir, "opt"), sandboxImage, filepath.Join(c.BinDir, "cni"), n.CNIDir)
		cfgPath := filepath.Join(dir, "containerd.toml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		if _, err := c.start(n.Name+"-containerd", nsenter(n.NetNS, "containerd", "--config", cfgPath)...); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" containerd up", time.Minute, func() error {
			return run(ctx, "ctr", "--address", n.Socket, "version")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) importImages(ctx context.Context) error {
	for _, n := range c.Nodes {
		for _, img := range c.opts.Images {
			if err := run(ctx, "ctr", "--address", n.Socket, "-n", "k8s.io", "images", "import", img); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
	}
	return nil
}

func (c *Cluster) startKubelets(ctx context.Context) error {
	for _, n := range c.Nodes {
		dir := filepath.Join(c.RunDir, n.Name)
		root := "/" + n.Name
		if err := makeCgroupRoot(n.Name); err != nil {
			return err
		}
		resolv := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(resolv, []byte("# no cluster DNS in the harness\n"), 0o644); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
clusterDomain: cluster.local
resolvConf: %q
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
maxPods: 30
`, n.IP, c.pkiPath("ca.crt"), root, n.Socket, resolv)
		cfgPath := filepath.Join(dir, "kubelet.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		_, err := c.start(n.Name+"-kubelet", nsenter(n.NetNS, filepath.Join(c.BinDir, "kubelet"),
			"--config="+cfgPath, "--kubeconfig="+c.kubeconfigPath(n.Name),
			"--hostname-override="+n.Name, "--node-ip="+n.IP,
			"--root-dir="+filepath.Join(dir, "kubelet"), "--cert-dir="+filepath.Join(dir, "kubelet-pki"), "--v=1")...)
		if err != nil {
			return err
		}
	}
	return nil
}

// podNetworks waits for the controller-manager to give each node a pod
// CIDR, then writes the node's CNI configuration (bridge, portmap,
// bandwidth) and the routes between nodes, as a CNI daemon would.
func (c *Cluster) podNetworks(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" registered with a pod CIDR", 3*time.Minute, func() error {
			var node struct {
				Spec struct {
					PodCIDR string `json:"podCIDR"`
				} `json:"spec"`
			}
			if err := c.getJSON(ctx, "/api/v1/nodes/"+n.Name, &node); err != nil {
				return err
			}
			if node.Spec.PodCIDR == "" {
				return errors.New("no pod CIDR yet")
			}
			n.PodCIDR = node.Spec.PodCIDR
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		conf := map[string]any{
			"cniVersion": "1.0.0", "name": "cnperf-harness",
			"plugins": []any{
				map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
					"hairpinMode": true, "mtu": 1500,
					"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.PodCIDR}}},
						"routes": []map[string]string{{"dst": "0.0.0.0/0"}}, "dataDir": filepath.Join(c.RunDir, n.Name, "ipam")}},
				map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
				map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
			},
		}
		b, _ := json.MarshalIndent(conf, "", "  ")
		if err := os.WriteFile(filepath.Join(n.CNIDir, "10-cnperf-harness.conflist"), b, 0o644); err != nil {
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
		if err := run(ctx, "ip", "route", "add", n.PodCIDR, "via", n.IP, "dev", rootVeth); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startProxies(ctx context.Context) error {
	for _, n := range c.Nodes {
		dir := filepath.Join(c.RunDir, n.Name)
		cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.kubeconfigPath("kube-proxy"), clusterCIDR, n.Name)
		cfgPath := filepath.Join(dir, "kube-proxy.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		if _, err := c.start(n.Name+"-kube-proxy", nsenter(n.NetNS, filepath.Join(c.BinDir, "kube-proxy"),
			"--config="+cfgPath, "--v=1")...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitNodesReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" Ready", 3*time.Minute, func() error {
			var node struct {
				Status struct {
					Conditions []struct{ Type, Status, Message string } `json:"conditions"`
				} `json:"status"`
			}
			if err := c.getJSON(ctx, "/api/v1/nodes/"+n.Name, &node); err != nil {
				return err
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == "Ready" {
					if cond.Status == "True" {
						return nil
					}
					return fmt.Errorf("not ready: %s", cond.Message)
				}
			}
			return errors.New("no Ready condition yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.adminToken)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, tail(string(b), 200))
	}
	return json.Unmarshal(b, v)
}

// Logs returns the end of a component's log (for test failures).
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, p := range c.procs {
		data, _ := os.ReadFile(p.log)
		fmt.Fprintf(&b, "\n--- %s:\n%s", p.name, tail(string(data), n))
	}
	return b.String()
}

// Down stops everything and removes what Up made; it restores the
// sysctls kubelet changed. It is safe to call more than once.
func (c *Cluster) Down() error {
	if c == nil {
		return nil
	}
	var errs []error
	// Kubelets and proxies first, so nothing restarts containers.
	order := append([]*proc(nil), c.procs...)
	sort.SliceStable(order, func(i, j int) bool { return rank(order[i].name) < rank(order[j].name) })
	for _, p := range order {
		stopProc(p)
	}
	c.procs = nil
	errs = append(errs, Cleanup(c.opts.CacheDir, c.log))
	return errors.Join(errs...)
}

func rank(name string) int {
	switch {
	case strings.HasSuffix(name, "kubelet"), strings.HasSuffix(name, "kube-proxy"):
		return 0
	case strings.HasSuffix(name, "containerd"):
		return 1
	case name == "etcd":
		return 3
	}
	return 2
}

func stopProc(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Cleanup removes every trace of a harness cluster: processes recorded in
// the run directory, containers in the nodes' cgroups, containerd shims of
// the nodes' sockets, mounts under the run and socket directories, the
// namespaces and veth, the cgroups, and the run directory; and it restores
// saved sysctls. It is what Down does, and what Up does first with the
// leftovers of a run that crashed.
func Cleanup(cacheDir string, log *slog.Logger) error {
	runDir := filepath.Join(cacheDir, "run")
	sockDir := "/run/cnperf-k8s"
	var errs []error
	killRecorded(filepath.Join(runDir, "pids"))
	killShims(sockDir)
	for _, name := range cgroupRoots() {
		killCgroup(name)
	}
	killShims(sockDir)
	errs = append(errs, unmountUnder(runDir, sockDir))
	for _, ns := range harnessNetns() {
		if err := run(context.Background(), "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + rootVeth); err == nil {
		if err := run(context.Background(), "ip", "link", "del", rootVeth); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range cgroupRoots() {
		errs = append(errs, removeCgroup(name))
	}
	if err := restoreSysctls(filepath.Join(runDir, "sysctls.json")); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{runDir, sockDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	err := errors.Join(errs...)
	if err != nil && log != nil {
		log.Warn("cleanup incomplete", "err", err)
	}
	return err
}

func killRecorded(pidFile string) {
	f, err := os.Open(pidFile)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 1 {
			continue
		}
		// Only if the pid still runs the program recorded for it.
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(exe) != filepath.Base(fields[1]) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// killShims kills containerd shims started for the harness's sockets.
func killShims(sockDir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && strings.Contains(string(cmdline), sockDir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func cgroupRoots() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup/memory")
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix+"-node") {
			out = append(out, e.Name())
		}
	}
	return out
}

// killCgroup kills every process in the cgroup subtree (they are the
// nodes' containers) until none is left.
func killCgroup(name string) {
	for i := 0; i < 50; i++ {
		n := 0
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/memory", name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func removeCgroup(name string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 20; i++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below the given directories, deepest
// first.
func unmountUnder(dirs ...string) error {
	var errs []error
	for pass := 0; pass < 3; pass++ {
		mounts := mountsUnder(dirs...)
		if len(mounts) == 0 {
			return nil
		}
		errs = nil
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

func mountsUnder(dirs ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func harnessNetns() []string {
	ents, _ := os.ReadDir("/var/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func saveSysctls(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil // keep the first saved values
	}
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return fmt.Errorf("save sysctl %s: %w", k, err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	b, _ := json.Marshal(vals)
	return os.WriteFile(path, b, 0o644)
}

func restoreSysctls(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	vals := map[string]string{}
	if err := json.Unmarshal(b, &vals); err != nil {
		return fmt.Errorf("saved sysctls %s: %w", path, err)
	}
	var errs []error
	for k, v := range vals {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// SysctlsNow reads the sysctls kubelet changes (for tests that check the
// restore).
func SysctlsNow() map[string]string {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}
