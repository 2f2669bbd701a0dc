package k8stest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestCNINamed: the harness's CNIs by name; Antrea and Calico's IP-in-IP
// are refused up front saying which kernel module is missing.
func TestCNINamed(t *testing.T) {
	for _, tc := range []struct {
		name, want, err string
	}{
		{name: "", want: "flannel vxlan"},
		{name: "flannel", want: "flannel vxlan"},
		{name: "calico", want: "calico vxlan"},
		{name: "bridge", want: "bridge"},
		{name: "antrea", err: "openvswitch"},
		{name: "calico-ipip", err: "ipip module"},
		{name: "cilium", want: "cilium vxlan"},
		{name: "cilium-geneve", err: "geneve module"},
		{name: "weave", err: "flannel, calico, cilium or bridge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cni, err := CNINamed(tc.name)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cni.Facts().String(); got != tc.want {
				t.Errorf("facts %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCalicoBackends: vxlan and direct run, with their MTUs; IP-in-IP and
// eBPF are refused with the reason; unknown backends are named.
func TestCalicoBackends(t *testing.T) {
	for _, tc := range []struct {
		backend, err string
		mtu          int
		vxlanMode    string
	}{
		{backend: "vxlan", mtu: 1450, vxlanMode: "Always"},
		{backend: "direct", mtu: 1500, vxlanMode: "Never"},
		{backend: "ipip", err: "lacks"},
		{backend: "bpf", err: "CGO"},
		{backend: "geneve", err: "runs vxlan, direct"},
	} {
		err := checkCalicoBackend(tc.backend)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one saying %q", tc.backend, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.backend, err)
		}
		if f := (&Calico{Backend: tc.backend}).Facts(); f.PodMTU != tc.mtu || f.Version != CalicoVersion {
			t.Errorf("%s: facts %+v, want MTU %d", tc.backend, f, tc.mtu)
		}
		if m := calicoVXLANMode(tc.backend); m != tc.vxlanMode {
			t.Errorf("%s: vxlanMode %q, want %q", tc.backend, m, tc.vxlanMode)
		}
	}
}

// TestCalicoObjects: from a manifest shaped like Calico's, the CRDs and
// calico-node's and the CNI plugin's ServiceAccounts and RBAC are picked
// with their API paths; kube-controllers, ConfigMaps and DaemonSets are
// not.
func TestCalicoObjects(t *testing.T) {
	manifest := `---
# Source: calico/templates/calico-kube-controllers.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: calico-kube-controllers
  namespace: kube-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: calico-node
  namespace: kube-system
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: calico-config
  namespace: kube-system
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ippools.crd.projectcalico.org
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata:
  name: calico-cni-plugin
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata:
  name: calico-node
---
kind: DaemonSet
apiVersion: apps/v1
metadata:
  name: calico-node
  namespace: kube-system
`
	paths, objs, err := calicoObjects([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, o := range objs {
		got = append(got, o["kind"].(string)+" "+paths[i])
	}
	want := []string{
		"ServiceAccount /api/v1/namespaces/kube-system/serviceaccounts",
		"CustomResourceDefinition /apis/apiextensions.k8s.io/v1/customresourcedefinitions",
		"ClusterRole /apis/rbac.authorization.k8s.io/v1/clusterroles",
		"ClusterRoleBinding /apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	}
	if !slices.Equal(got, want) {
		t.Errorf("picked\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, _, err := calicoObjects([]byte("kind: ServiceAccount\nmetadata:\n  name: calico-node\n")); err == nil || !strings.Contains(err.Error(), "no namespace") {
		t.Errorf("a ServiceAccount without a namespace: %v", err)
	}
}

// TestCalicoConflist: the node's conflist chains the plugins the facts
// name, with the node's own name, name file and paths and the backend's
// MTU, and calico-ipam with the CNI plugin's own kubeconfig.
func TestCalicoConflist(t *testing.T) {
	b := calicoConflist("kcn-node2", "/run/kcn-node2/calico", "/pki/calico-cni-plugin.kubeconfig", 1450)
	var conf struct {
		Plugins []struct {
			Type         string `json:"type"`
			Nodename     string `json:"nodename"`
			NodenameFile string `json:"nodename_file"`
			MTU          int    `json:"mtu"`
			IPAM         struct {
				Type string `json:"type"`
			} `json:"ipam"`
			Kubernetes struct {
				Kubeconfig string `json:"kubeconfig"`
			} `json:"kubernetes"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	if want := (&Calico{}).Facts().Plugins; !slices.Equal(types, want) {
		t.Errorf("plugins %v, facts say %v", types, want)
	}
	p := conf.Plugins[0]
	if p.Nodename != "kcn-node2" || p.NodenameFile != "/run/kcn-node2/calico/nodename" || p.MTU != 1450 ||
		p.IPAM.Type != "calico-ipam" || p.Kubernetes.Kubeconfig != "/pki/calico-cni-plugin.kubeconfig" {
		t.Errorf("calico plugin %+v", p)
	}
}
