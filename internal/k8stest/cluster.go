package k8stest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
	// CNI gives the pods their network (default: Bridge, the harness's own
	// conflist and routes).
	CNI CNI
	Log *slog.Logger
}

// Node is one kubelet's node.
type Node struct {
	Name    string
	NetNS   string // name under /var/run/netns
	IP      string
	CNIDir  string // its CNI configuration directory
	Socket  string // its containerd socket
	PodCIDR string
	// Zone is its topology.kubernetes.io/zone label (every node its own
	// zone; the region is harnessRegion), which the API server copies
	// onto the pods bound to it (PodTopologyLabelsAdmission).
	Zone string
}

// harnessRegion is every node's topology.kubernetes.io/region label.
const harnessRegion = "kcn-region"

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
	// CNI is the pod network the cluster runs.
	CNI CNI
}

// stage is one step of bringing the cluster up; Up runs them in order and
// tears everything down when one fails.
type stage struct {
	name string
	run  func(context.Context) error
}

// stages are the steps of Up: the nodes' network, PKI, etcd, the control
// plane, the nodes (containerd, images, kubelets), the CNI, kube-proxy.
func (c *Cluster) stages() []stage {
	return []stage{
		{"network", c.network},
		{"certificates", c.pki},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controller-manager and scheduler", c.startControllers},
		{"containerd", c.startContainerds},
		{"images", c.importImages},
		{"kubelets", c.startKubelets},
		{"pod network (" + c.CNI.Facts().String() + ")", c.podNetwork},
		{"kube-proxy", c.startProxies},
		{"nodes ready", c.waitNodesReady},
	}
}

type proc struct {
	name string
	done chan struct{}
	err  error
	log  string

	mu       sync.Mutex
	cmd      *exec.Cmd // the running process (a supervised one's latest)
	stopping bool      // stopped on purpose: not restarted
	restarts int
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
	if o.CNI == nil {
		o.CNI = Bridge{}
	}
	c = &Cluster{opts: o, log: o.Log, CNI: o.CNI,
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
			CNIDir: filepath.Join(c.RunDir, name, "cni"), Socket: filepath.Join(c.SockDir, name, "containerd.sock"),
			Zone: fmt.Sprintf("kcn-zone-%d", i)})
	}
	c.CNIConfDir = func(node string) string { return filepath.Join(c.RunDir, node, "cni") }
	for _, s := range c.stages() {
		start := time.Now()
		if err := s.run(ctx); err != nil {
			return c, fmt.Errorf("cluster %s: %w%s", s.name, err, c.exited())
		}
		c.log.Info("cluster stage done", "stage", s.name, "took", time.Since(start).Round(time.Millisecond))
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
	cmd.Env = append(os.Environ(), "FLANNEL_VERSION="+FlannelVersion)
	if _, ok := c.CNI.(*Calico); ok {
		cmd.Env = append(cmd.Env, "CALICO_VERSION="+CalicoVersion) // built only for a Calico cluster
	}
	if _, ok := c.CNI.(*Cilium); ok {
		cmd.Env = append(cmd.Env, "CILIUM_VERSION="+CiliumVersion) // built only for a Cilium cluster
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build Kubernetes and the CNIs: %w\n%s", err, tail(errb.String(), 3000))
	}
	c.log.Info("kubernetes and CNI binaries ready", "cni", c.CNI.Facts().Name, "took", time.Since(start).Round(time.Second))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
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
