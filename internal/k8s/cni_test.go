package k8s

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cnperf/cnperf/internal/suite"
)

// daemonSet is a node DaemonSet running image, with env and args.
func daemonSet(ns, name, image string, env map[string]string, args ...string) *appsv1.DaemonSet {
	ctr := corev1.Container{Name: "main", Image: image, Args: args}
	for k, v := range env {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "install-cni", Image: "busybox:1.36"}},
			Containers:     []corev1.Container{{Name: "sidecar", Image: "registry.k8s.io/pause:3.10"}, ctr}}}}}
}

// ciliumConfig is Cilium's ConfigMap in ns.
func ciliumConfig(ns string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cilium-config"}, Data: data}
}

// TestDetectCNI: every CNI cnperf knows is named from its DaemonSet (by
// image, else by name) with the image tag as its version and its mode
// from the nodes' annotations, its container's configuration, Cilium's
// ConfigMap or a node's tunnel device; Calico's version from its ClusterInformation; an
// unknown CNI from the runtime's CNI configuration.
func TestDetectCNI(t *testing.T) {
	flannelNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{flannelBackendAnnotation: "host-gw"}}}
	calicoNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
		calicoAddressAnnotation: "10.0.0.1/24", calicoVXLANAnnotation: "10.244.0.1"}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	cnperf := daemonSet("cnperf", "cnperf-agent", "ghcr.io/cnperf/cnperf:v1.2.0", nil)
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		calico  string // ClusterInformation's calicoVersion
		report  *NodeReport
		want    CNI
		wantSrc string
	}{
		{name: "flannel DaemonSet, backend from the nodes", objs: []runtime.Object{flannelNode, cnperf,
			daemonSet("kube-flannel", "kube-flannel-ds", "docker.io/flannel/flannel:v0.26.1", nil)},
			want: CNI{Name: "flannel", Version: "v0.26.1", Mode: "host-gw"}, wantSrc: "daemonset kube-flannel/kube-flannel-ds"},
		{name: "flannel by its ghcr.io image", objs: []runtime.Object{plain, cnperf,
			daemonSet("networking", "flannel-agent", "ghcr.io/flannel-io/flannel:v0.28.10", nil)},
			want: CNI{Name: "flannel", Version: "v0.28.10"}, wantSrc: "daemonset networking/flannel-agent"},
		{name: "flannel without a DaemonSet (no version)", objs: []runtime.Object{flannelNode},
			want: CNI{Name: "flannel", Mode: "host-gw"}, wantSrc: "node annotations"},
		{name: "calico: version from ClusterInformation", objs: []runtime.Object{calicoNode,
			daemonSet("calico-system", "calico-node", "quay.io/calico/node:v3.30.0", nil)}, calico: "v3.31.0",
			want: CNI{Name: "calico", Version: "v3.31.0", Mode: "vxlan"}, wantSrc: "calico clusterinformation"},
		{name: "calico ipip from the pool environment", objs: []runtime.Object{plain,
			daemonSet("kube-system", "calico-node", "docker.io/calico/node:v3.29.1", map[string]string{"CALICO_IPV4POOL_IPIP": "Always"})},
			want: CNI{Name: "calico", Version: "v3.29.1", Mode: "ipip"}},
		{name: "cilium native routing flag", objs: []runtime.Object{plain,
			daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.16.3@sha256:62d2a09b", nil, "--config-dir=/tmp", "--routing-mode=native")},
			want: CNI{Name: "cilium", Version: "v1.16.3", Mode: "native"}},
		{name: "cilium vxlan from its tunnel device", objs: []runtime.Object{plain,
			daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.20.2", nil)},
			report: &NodeReport{Tunnels: []string{"cilium_vxlan"}, CNI: &CNIConfig{Name: "cilium", Plugins: []string{"cilium-cni"}}},
			want:   CNI{Name: "cilium", Version: "v1.20.2", Mode: "vxlan"}, wantSrc: "tunnel device cilium_vxlan"},
		{name: "cilium no tunnel device: native", objs: []runtime.Object{plain},
			report: &NodeReport{CNI: &CNIConfig{File: "05-cilium.conflist", Name: "cilium", Plugins: []string{"cilium-cni"}}},
			want:   CNI{Name: "cilium", Mode: "native"}, wantSrc: "cni configuration 05-cilium.conflist"},
		{name: "cilium vxlan from its ConfigMap", objs: []runtime.Object{plain,
			daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.20.2", nil, "--config-dir=/tmp/cilium/config-map"),
			ciliumConfig("kube-system", map[string]string{"routing-mode": "tunnel", "tunnel-protocol": "vxlan"})},
			want: CNI{Name: "cilium", Version: "v1.20.2", Mode: "vxlan"}, wantSrc: "configmap kube-system/cilium-config"},
		{name: "cilium geneve from its ConfigMap, not native for want of a VXLAN device", objs: []runtime.Object{plain,
			daemonSet("cilium", "cilium", "quay.io/cilium/cilium:v1.16.3", nil, "--config-dir=/tmp/cilium/config-map"),
			ciliumConfig("cilium", map[string]string{"routing-mode": "tunnel", "tunnel-protocol": "geneve"})},
			report: &NodeReport{CNI: &CNIConfig{Name: "cilium", Plugins: []string{"cilium-cni"}}},
			want:   CNI{Name: "cilium", Version: "v1.16.3", Mode: "geneve"}, wantSrc: "configmap cilium/cilium-config"},
		{name: "cilium native from its older ConfigMap key", objs: []runtime.Object{plain,
			daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.13.4", nil),
			ciliumConfig("kube-system", map[string]string{"tunnel": "disabled"})},
			want: CNI{Name: "cilium", Version: "v1.13.4", Mode: "native"}},
		{name: "antrea", objs: []runtime.Object{plain, daemonSet("kube-system", "antrea-agent", "antrea/antrea-agent-ubuntu:v2.2.0", nil)},
			want: CNI{Name: "antrea", Version: "v2.2.0"}},
		{name: "kube-ovn", objs: []runtime.Object{plain, daemonSet("kube-system", "kube-ovn-cni", "docker.io/kubeovn/kube-ovn:v1.13.2", nil)},
			want: CNI{Name: "kube-ovn", Version: "v1.13.2", Mode: "geneve"}},
		{name: "ovn-kubernetes by DaemonSet name", objs: []runtime.Object{plain, daemonSet("ovn-kubernetes", "ovnkube-node", "mirror.example.com/ovn/ovnk:release-1.0", nil)},
			want: CNI{Name: "ovn-kubernetes", Version: "release-1.0", Mode: "geneve"}},
		{name: "weave", objs: []runtime.Object{plain, daemonSet("kube-system", "weave-net", "weaveworks/weave-kube:2.8.1", nil)},
			want: CNI{Name: "weave", Version: "2.8.1"}},
		{name: "kindnet", objs: []runtime.Object{plain, daemonSet("kube-system", "kindnet", "docker.io/kindest/kindnetd:v20250512-df8de77b", nil)},
			want: CNI{Name: "kindnet", Version: "v20250512-df8de77b", Mode: "native"}},
		{name: "aws vpc cni", objs: []runtime.Object{plain, daemonSet("kube-system", "aws-node", "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1", nil)},
			want: CNI{Name: "aws-vpc-cni", Version: "v1.19.2-eksbuild.1", Mode: "native"}},
		{name: "azure cns", objs: []runtime.Object{plain, daemonSet("kube-system", "azure-cns", "mcr.microsoft.com/containernetworking/azure-cns:v1.6.13", nil)},
			want: CNI{Name: "azure-cni", Version: "v1.6.13"}},
		{name: "gke netd, image with a registry port and latest tag", objs: []runtime.Object{plain, daemonSet("kube-system", "netd", "gke.gcr.io:443/netd:latest", nil)},
			want: CNI{Name: "gke-netd", Mode: "native"}},
		{name: "unknown: the conflist's first plugin", objs: []runtime.Object{plain, cnperf},
			report: &NodeReport{CNI: &CNIConfig{File: "10-bridge.conflist", Name: "cbr0", Plugins: []string{"bridge", "portmap"}}},
			want:   CNI{Name: "bridge"}},
		{name: "nothing known", objs: []runtime.Object{plain, cnperf}, want: CNI{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dyn []runtime.Object
			if tc.calico != "" {
				dyn = append(dyn, &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "crd.projectcalico.org/v1", "kind": "ClusterInformation",
					"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"calicoVersion": tc.calico}}})
			}
			c := NewForInterfaces(fake.NewSimpleClientset(tc.objs...), dynfake.NewSimpleDynamicClient(runtime.NewScheme(), dyn...))
			nodes, err := c.Nodes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := c.DetectCNI(context.Background(), nodes, tc.report)
			if got.Name != tc.want.Name || got.Version != tc.want.Version || got.Mode != tc.want.Mode {
				t.Errorf("DetectCNI = %+v, want %+v", got, tc.want)
			}
			if tc.wantSrc != "" && !slices.Contains(got.From, tc.wantSrc) {
				t.Errorf("from %q, want %q among them", got.From, tc.wantSrc)
			}
			if slices.Contains(got.From, "no cilium_vxlan device") && tc.want.Mode != "native" {
				t.Errorf("from %q: a mode guessed from the missing VXLAN device", got.From)
			}
		})
	}
}

// TestImageRef: the repository and tag of image references with and
// without registry, port, tag and digest.
func TestImageRef(t *testing.T) {
	for _, tc := range []struct{ image, repo, tag string }{
		{"flannel/flannel:v0.26.1", "flannel/flannel", "v0.26.1"},
		{"docker.io/flannel/flannel:v0.26.1", "flannel/flannel", "v0.26.1"},
		{"localhost:5000/calico/node", "calico/node", ""},
		{"quay.io/cilium/cilium:v1.16.3@sha256:abc", "cilium/cilium", "v1.16.3"},
		{"quay.io/cilium/cilium@sha256:abc", "cilium/cilium", ""},
		{"netd:latest", "netd", ""},
	} {
		if r, g := imageRepo(tc.image), imageTag(tc.image); r != tc.repo || g != tc.tag {
			t.Errorf("%s: repo %q tag %q, want %q %q", tc.image, r, g, tc.repo, tc.tag)
		}
	}
}

// TestEnforcesNetworkPolicy: Calico enforces NetworkPolicy, Flannel does
// not (the reason names it), and an unknown CNI is not assumed to.
func TestEnforcesNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
		why  string
	}{{"calico", true, ""}, {"cilium", true, ""}, {"flannel", false, "flannel, does not enforce"}, {"", false, "not known"}} {
		ok, why := CNI{Name: tc.name}.EnforcesNetworkPolicy()
		if ok != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%q: %v %q, want %v and a reason containing %q", tc.name, ok, why, tc.want, tc.why)
		}
	}
	caps := (&Env{CNI: CNI{Name: "flannel"}}).Caps()
	if caps.Has(suite.CapNetworkPolicy) || !strings.Contains(caps.Reason(suite.CapNetworkPolicy), "flannel") {
		t.Errorf("flannel's caps: has %v, reason %q", caps.Has(suite.CapNetworkPolicy), caps.Reason(suite.CapNetworkPolicy))
	}
}
