package k8stest

import (
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKubeletConfigOwnPodLogsDir: each kubelet of the harness keeps its
// pods' logs in a directory of its own. With the shared default
// (/var/log/pods) each kubelet's container garbage collection removed the
// other node's pods' log directories, and the agents' logs read empty.
func TestKubeletConfigOwnPodLogsDir(t *testing.T) {
	runDir := "/var/cache/cnperf-k8s/run"
	seen := map[string]string{}
	for _, n := range []*Node{
		{Name: "kcn-node1", IP: "10.250.0.1", Socket: "/run/cnperf-k8s/kcn-node1/containerd.sock"},
		{Name: "kcn-node2", IP: "10.250.0.2", Socket: "/run/cnperf-k8s/kcn-node2/containerd.sock"},
	} {
		dir := filepath.Join(runDir, n.Name)
		cfg := kubeletConfig(n, "/ca.crt", "/"+n.Name, filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "pod-logs"))
		var kc map[string]any
		if err := yaml.Unmarshal([]byte(cfg), &kc); err != nil {
			t.Fatalf("%s: the kubelet configuration is not YAML: %v\n%s", n.Name, err, cfg)
		}
		if kc["kind"] != "KubeletConfiguration" || kc["address"] != n.IP {
			t.Errorf("%s: kind %v, address %v", n.Name, kc["kind"], kc["address"])
		}
		logs, _ := kc["podLogsDir"].(string)
		switch {
		case logs == "":
			t.Errorf("%s: no podLogsDir: the kubelets share /var/log/pods and remove each other's pods' logs", n.Name)
		case !filepath.IsAbs(logs) || filepath.Clean(logs) != logs:
			t.Errorf("%s: podLogsDir %q must be absolute and clean (kubelet refuses it otherwise)", n.Name, logs)
		case !strings.HasPrefix(logs, dir+"/"):
			t.Errorf("%s: podLogsDir %q is not under the node's run directory %s (removed at teardown)", n.Name, logs, dir)
		case seen[logs] != "":
			t.Errorf("%s and %s share podLogsDir %q", seen[logs], n.Name, logs)
		}
		seen[logs] = n.Name
	}
}
