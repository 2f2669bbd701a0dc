package k8s

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEnvEnvironment(t *testing.T) {
	node := func(name string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{flannelBackendAnnotation: "vxlan"}},
			Status: corev1.NodeStatus{
				NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)"},
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			}}
	}
	e := &Env{Client: fakeClient(node("b"), node("a"))}
	env, err := e.Environment(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if env.Platform != "kubernetes" || env.CNI != "flannel" || env.Backend != "vxlan" || len(env.Nodes) != 2 || env.Nodes[0].Name != "a" {
		t.Fatalf("environment = %+v", env)
	}
	// Flannel annotates the nodes but no DaemonSet shows its version:
	// the environment says so.
	if env.CNIVersion != "" || !slices.ContainsFunc(env.Notes, func(n string) bool { return strings.Contains(n, "version of flannel is not known") }) {
		t.Errorf("version %q, notes %q: want none, and a note saying why", env.CNIVersion, env.Notes)
	}
	if n := env.Nodes[1]; n.Kernel != "6.1.0-18-amd64" || n.CPUs != 4 || n.MemoryBytes != 8<<30 || n.OSImage == "" {
		t.Errorf("node = %+v", n)
	}
}

// TestEnvEnvironmentNamesAnyCNI: the stored environment names a CNI that
// annotates no node, with its version, from its DaemonSet; a session's
// facts (which also read a node's CNI configuration) take precedence.
func TestEnvEnvironmentNamesAnyCNI(t *testing.T) {
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	for _, tc := range []struct {
		name                  string
		env                   *Env
		cni, version, backend string
	}{
		{"cilium from its DaemonSet", &Env{Client: fakeClient(plain, daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.20.2", nil, "--routing-mode=native"))},
			"cilium", "v1.20.2", "native"},
		{"antrea from its DaemonSet", &Env{Client: fakeClient(plain, daemonSet("kube-system", "antrea-agent", "antrea/antrea-agent-ubuntu:v2.2.0", nil))},
			"antrea", "v2.2.0", ""},
		{"the session's facts", &Env{Client: fakeClient(plain), CNI: CNI{Name: "flannel", Version: "v0.28.10", Mode: "vxlan", From: []string{"node annotations"}}},
			"flannel", "v0.28.10", "vxlan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := tc.env.Environment(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if env.CNI != tc.cni || env.CNIVersion != tc.version || env.Backend != tc.backend {
				t.Errorf("environment CNI %q %q %q, want %q %q %q", env.CNI, env.CNIVersion, env.Backend, tc.cni, tc.version, tc.backend)
			}
		})
	}
}
