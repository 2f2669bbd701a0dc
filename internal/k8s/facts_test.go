package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCNIOfNodes: flannel's backend-type annotation, or calico-node's
// address and tunnel annotations, name the CNI and its backend; nodes without it name none; nodes that disagree show both.
func TestCNIOfNodes(t *testing.T) {
	node := func(name, backend string) Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if backend != "" {
			n.Annotations = map[string]string{flannelBackendAnnotation: backend}
		}
		return nodeOf(n)
	}
	// calico-node's annotations: its address, and the tunnel address of
	// the encapsulation in use (none on Direct).
	calico := func(name, tunnel string) Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{calicoAddressAnnotation: "10.250.0.11/24"}}}
		if tunnel != "" {
			n.Annotations[tunnel] = "10.245.3.0"
		}
		return nodeOf(n)
	}
	for _, tc := range []struct {
		name             string
		nodes            []Node
		wantCNI, wantBck string
	}{
		{"flannel vxlan", []Node{node("a", "vxlan"), node("b", "vxlan")}, "flannel", "vxlan"},
		{"flannel host-gw", []Node{node("a", "host-gw"), node("b", "host-gw")}, "flannel", "host-gw"},
		{"mid-switch", []Node{node("a", "vxlan"), node("b", "host-gw")}, "flannel", "vxlan+host-gw"},
		{"no annotation", []Node{node("a", ""), node("b", "")}, "", ""},
		{"calico vxlan", []Node{calico("a", calicoVXLANAnnotation), calico("b", calicoVXLANAnnotation)}, "calico", "vxlan"},
		{"calico direct", []Node{calico("a", ""), calico("b", "")}, "calico", "direct"},
		{"calico ipip", []Node{calico("a", calicoIPIPAnnotation)}, "calico", "ipip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cni, backend := cniOfNodes(tc.nodes)
			if cni != tc.wantCNI || backend != tc.wantBck {
				t.Errorf("cniOfNodes = %q, %q; want %q, %q", cni, backend, tc.wantCNI, tc.wantBck)
			}
		})
	}
}
