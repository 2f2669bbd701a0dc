package k8s

import (
	"context"
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
	if n := env.Nodes[1]; n.Kernel != "6.1.0-18-amd64" || n.CPUs != 4 || n.MemoryBytes != 8<<30 || n.OSImage == "" {
		t.Errorf("node = %+v", n)
	}
}
