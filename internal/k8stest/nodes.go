package k8stest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

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
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, filepath.Join(dir, "containerd"), filepath.Join(sock, "state"), n.Socket, n.Socket+".ttrpc",
			filepath.Join(dir, "opt"), sandboxImage, filepath.Join(c.BinDir, "cni"), n.CNIDir, c.registryHostsDir())
		cfgPath := filepath.Join(dir, "containerd.toml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		var env []string
		if rt, ok := c.CNI.(runtimeEnver); ok {
			env = rt.RuntimeEnv(c, n)
		}
		if _, err := c.startSupervisedEnv(n.Name+"-containerd", nil, env, nsenter(n.NetNS, "containerd", "--config", cfgPath)...); err != nil {
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

// kubeletSocket is where every kubelet binds its device-plugin
// registration socket. The path is compiled into kubelet
// (pluginapi.KubeletSocket), not under --root-dir, so the harness's
// kubelets share it. A kubelet removes the files there as it starts and
// then binds: two starting at once can both remove before either binds,
// and the later bind fails ("address already in use"; that kubelet exits,
// and its node never registers). So the kubelets start one at a time,
// each once the previous one's socket is there; each start removes the
// last one's file, which only device plugins (none here) would miss.
const kubeletSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

func (c *Cluster) startKubelets(ctx context.Context) error {
	// A socket file left by an earlier cluster would look like this
	// cluster's first kubelet's.
	if err := os.Remove(kubeletSocket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove a stale %s: %w", kubeletSocket, err)
	}
	for i, n := range c.Nodes {
		dir := filepath.Join(c.RunDir, n.Name)
		root := "/" + n.Name
		if err := makeCgroupRoot(n.Name); err != nil {
			return err
		}
		resolv := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(resolv, []byte("# no cluster DNS in the harness\n"), 0o644); err != nil {
			return err
		}
		cfg := kubeletConfig(n, c.pkiPath("ca.crt"), root, resolv, filepath.Join(dir, "pod-logs"))
		cfgPath := filepath.Join(dir, "kubelet.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		_, err := c.start(n.Name+"-kubelet", nsenter(n.NetNS, filepath.Join(c.BinDir, "kubelet"),
			"--config="+cfgPath, "--kubeconfig="+c.kubeconfigPath(n.Name),
			"--hostname-override="+n.Name, "--node-ip="+n.IP,
			"--node-labels=topology.kubernetes.io/zone="+n.Zone+",topology.kubernetes.io/region="+harnessRegion,
			"--root-dir="+filepath.Join(dir, "kubelet"), "--cert-dir="+filepath.Join(dir, "kubelet-pki"), "--v=1")...)
		if err != nil {
			return err
		}
		if i == len(c.Nodes)-1 {
			continue
		}
		if err := c.poll(ctx, n.Name+" kubelet's device-plugin socket bound", time.Minute, func() error {
			_, err := os.Stat(kubeletSocket)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// kubeletConfig is node n's KubeletConfiguration. podLogs is a directory
// of this node's own: every kubelet's container garbage collection
// removes the pod log directories of pods it does not run (once a
// minute), and with the default /var/log/pods each kubelet of the harness
// removed the other node's pods' logs: their containers kept writing to
// the unlinked files and `kubectl logs` answered 200 with an empty body
// (the kubelet commits the answer before it opens the file). A real
// cluster has one kubelet per machine, so it never sees this.
func kubeletConfig(n *Node, caFile, cgroupRoot, resolv, podLogs string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
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
podLogsDir: %q
`, n.IP, caFile, cgroupRoot, n.Socket, resolv, podLogs)
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
