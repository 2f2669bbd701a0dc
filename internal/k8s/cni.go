package k8s

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CNI is the cluster's CNI as cnperf finds it: its name, release and
// datapath mode, and where each was read. Any field the cluster does not
// show stays empty rather than guessed.
type CNI struct {
	// Name is the CNI ("flannel", "calico", "cilium", "antrea",
	// "kube-ovn", "ovn-kubernetes", "weave", "kindnet", "aws-vpc-cni",
	// "azure-cni", "gke-netd"; else the first plugin of the runtime's
	// CNI configuration).
	Name string `json:"name,omitempty"`
	// Version is the CNI's release: Calico's ClusterInformation, else the
	// tag of the CNI DaemonSet's image.
	Version string `json:"version,omitempty"`
	// Mode is the datapath mode ("vxlan", "host-gw", "ipip", "direct",
	// "native", "geneve"): the nodes' annotations, the DaemonSet's
	// configuration, Cilium's cilium-config ConfigMap, a node's tunnel
	// device.
	Mode string `json:"mode,omitempty"`
	// From names where the facts were read, in order.
	From []string `json:"from,omitempty"`
}

// policyEnforcers are the CNIs that enforce NetworkPolicy themselves.
// Flannel and kindnet do not (kindnet only since v1.3, by an opt-in
// controller); a cloud CNI leaves it to an add-on (Calico, Cilium).
var policyEnforcers = []string{"calico", "cilium", "antrea", "kube-ovn", "ovn-kubernetes", "weave"}

// EnforcesNetworkPolicy says whether the CNI enforces NetworkPolicy, and
// if not (or not known), why.
func (c CNI) EnforcesNetworkPolicy() (bool, string) {
	switch {
	case c.Name == "":
		return false, "the cluster's CNI is not known, so whether it enforces NetworkPolicy is not either"
	case slices.Contains(policyEnforcers, c.Name):
		return true, ""
	}
	return false, fmt.Sprintf("the cluster's CNI, %s, does not enforce NetworkPolicy (policies would be stored and change nothing)", c.Name)
}

// cniDaemon is a CNI known by its DaemonSet's name or its image.
type cniDaemon struct {
	name string
	// sets are DaemonSet names; images are image paths (registry and tag
	// stripped) or their last elements.
	sets, images []string
	// mode is the CNI's one datapath mode, where it has only one.
	mode string
}

// cniDaemons are the CNIs cnperf recognises by their node DaemonSet.
var cniDaemons = []cniDaemon{
	{name: "flannel", sets: []string{"kube-flannel-ds", "flannel"}, images: []string{"flannel-io/flannel", "flannel/flannel", "flannelcni-flannel", "mirrored-flannel-flannel"}},
	{name: "calico", sets: []string{"calico-node"}, images: []string{"calico/node"}},
	{name: "cilium", sets: []string{"cilium"}, images: []string{"cilium/cilium"}},
	{name: "antrea", sets: []string{"antrea-agent"}, images: []string{"antrea-agent-ubuntu", "antrea-ubuntu", "antrea-agent"}},
	{name: "kube-ovn", sets: []string{"kube-ovn-cni"}, images: []string{"kubeovn/kube-ovn"}, mode: "geneve"},
	{name: "ovn-kubernetes", sets: []string{"ovnkube-node"}, images: []string{"ovn-kube-ubuntu", "ovn-kube-fedora", "ovn-daemonset"}, mode: "geneve"},
	{name: "weave", sets: []string{"weave-net"}, images: []string{"weaveworks/weave-kube", "weave-kube"}},
	{name: "kindnet", sets: []string{"kindnet"}, images: []string{"kindest/kindnetd", "kindnetd"}, mode: "native"},
	{name: "aws-vpc-cni", sets: []string{"aws-node"}, images: []string{"amazon-k8s-cni"}, mode: "native"},
	{name: "azure-cni", sets: []string{"azure-cns", "azure-cni"}, images: []string{"azure-cns", "azure-cni"}},
	{name: "gke-netd", sets: []string{"netd"}, images: []string{"netd"}, mode: "native"},
}

// cniPlugins name a CNI by a plugin type (or conflist name) of the
// runtime's CNI configuration.
var cniPlugins = map[string]string{
	"calico": "calico", "cilium-cni": "cilium", "cilium": "cilium", "flannel": "flannel", "antrea": "antrea",
	"kube-ovn": "kube-ovn", "ovn-k8s-cni-overlay": "ovn-kubernetes", "weave-net": "weave", "aws-cni": "aws-vpc-cni",
	"azure-vnet": "azure-cni", "kindnet": "kindnet", "gke-pod-network": "gke-netd",
}

// vxlanDevices are the VXLAN devices CNIs make on a node: a CNI whose
// device is there runs VXLAN.
var vxlanDevices = map[string]string{"flannel": "flannel.1", "calico": "vxlan.calico", "cilium": "cilium_vxlan"}

// DetectCNI finds the cluster's CNI from what the API shows: the Node
// objects' annotations, the CNI's DaemonSet in any namespace (its name or
// image; its image tag is the version), Calico's ClusterInformation,
// Cilium's ConfigMap, and, when r is not nil, a node's CNI configuration
// and tunnel devices as an inspector pod read them. What the caller may
// not list is skipped.
func (c *Client) DetectCNI(ctx context.Context, nodes []Node, r *NodeReport) CNI {
	var dss []appsv1.DaemonSet
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	list, err := c.Kube.AppsV1().DaemonSets("").List(rctx, metav1.ListOptions{})
	cancel()
	if err == nil {
		dss = list.Items
	} else {
		// No cluster-wide list: the usual places, one Get each.
		for _, k := range []struct{ ns, name string }{
			{"kube-system", "calico-node"}, {"calico-system", "calico-node"}, {"kube-system", "cilium"},
			{"kube-flannel", "kube-flannel-ds"}, {"kube-system", "kube-flannel-ds"}, {"kube-system", "antrea-agent"},
			{"kube-system", "weave-net"}, {"kube-system", "kindnet"}, {"kube-system", "aws-node"},
			{"kube-system", "kube-ovn-cni"}, {"ovn-kubernetes", "ovnkube-node"}, {"kube-system", "azure-cns"}, {"kube-system", "netd"},
		} {
			rctx, cancel := context.WithTimeout(ctx, c.timeout())
			ds, err := c.Kube.AppsV1().DaemonSets(k.ns).Get(rctx, k.name, metav1.GetOptions{})
			cancel()
			if err == nil {
				dss = append(dss, *ds)
			}
		}
	}
	cni := identifyCNI(nodes, dss, r)
	switch cni.Name {
	case "calico":
		if v := c.calicoVersion(ctx); v != "" {
			cni.Version = v
			cni.From = append(cni.From, "calico clusterinformation")
		}
	case "cilium":
		// Cilium's routing mode is in its ConfigMap (the DaemonSet's
		// agent reads it with --config-dir), beside the DaemonSet: it
		// stands where neither the agent's flags nor a tunnel device
		// said.
		ns := "kube-system"
		if ds, _, _ := cniDaemonSet(dss, "cilium"); ds != nil {
			ns = ds.Namespace
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(rctx, "cilium-config", metav1.GetOptions{})
		cancel()
		if err == nil && (cni.Mode == "" || slices.Contains(cni.From, ciliumNoDevice)) {
			if m := ciliumConfigMode(cm.Data); m != "" {
				cni.Mode = m
				cni.From = append(slices.DeleteFunc(cni.From, func(s string) bool { return s == ciliumNoDevice }),
					"configmap "+ns+"/cilium-config")
			}
		}
	}
	return cni
}

// ciliumNoDevice is the source of a Cilium mode guessed from the missing
// VXLAN device, which Cilium's ConfigMap overrides.
const ciliumNoDevice = "no cilium_vxlan device"

// ciliumConfigMode is the datapath mode Cilium's ConfigMap sets:
// routing-mode native, else the tunnel protocol (routing-mode tunnel, or
// the older tunnel key).
func ciliumConfigMode(data map[string]string) string {
	switch {
	case data["routing-mode"] == "native" || data["tunnel"] == "disabled":
		return "native"
	case data["routing-mode"] == "tunnel":
		if p := data["tunnel-protocol"]; p != "" {
			return p
		}
		return "vxlan" // Cilium's default tunnel protocol
	}
	return data["tunnel"]
}

// MissingVersion says why the CNI's version is not known ("" when it is,
// or when the CNI is not either).
func (c CNI) MissingVersion() string {
	if c.Name == "" || c.Version != "" {
		return ""
	}
	return fmt.Sprintf("the version of %s is not known: no DaemonSet of it shows an image tag (a CNI run outside Kubernetes, such as k3s's embedded flannel, shows none)", c.Name)
}

// identifyCNI names the CNI from the nodes' annotations, the DaemonSets
// and a node's inspection (nil when none was made).
func identifyCNI(nodes []Node, dss []appsv1.DaemonSet, r *NodeReport) CNI {
	var cni CNI
	if name, mode := cniOfNodes(nodes); name != "" {
		cni = CNI{Name: name, Mode: mode, From: []string{"node annotations"}}
	}
	if ds, ctr, known := cniDaemonSet(dss, cni.Name); ds != nil {
		if cni.Name == "" {
			cni.Name = known.name
		}
		cni.Version = imageTag(ctr.Image)
		if cni.Mode == "" {
			cni.Mode = daemonMode(known, ctr)
		}
		cni.From = append(cni.From, "daemonset "+ds.Namespace+"/"+ds.Name)
	}
	if r == nil {
		return cni
	}
	if r.CNI != nil {
		if cni.Name == "" {
			cni.Name = cniOfConfig(r.CNI)
			if cni.Name != "" {
				cni.From = append(cni.From, "cni configuration "+r.CNI.File)
			}
		}
	}
	if cni.Mode == "" && cni.Name != "" {
		if dev := vxlanDevices[cni.Name]; dev != "" && slices.Contains(r.Tunnels, dev) {
			cni.Mode = "vxlan"
			cni.From = append(cni.From, "tunnel device "+dev)
		} else if cni.Name == "cilium" {
			// Cilium writes its routing mode only into its ConfigMap and
			// agent state: no cilium_vxlan device is native routing.
			cni.Mode = "native"
			cni.From = append(cni.From, ciliumNoDevice)
		}
	}
	return cni
}

// cniOfConfig names the CNI of a runtime's CNI configuration: a plugin
// type or the configuration's name it knows, else the first plugin.
func cniOfConfig(cfg *CNIConfig) string {
	if n := cniPlugins[cfg.Name]; n != "" {
		return n
	}
	for _, p := range cfg.Plugins {
		if n := cniPlugins[p]; n != "" {
			return n
		}
	}
	if len(cfg.Plugins) > 0 {
		return cfg.Plugins[0]
	}
	return ""
}

// cniDaemonSet finds the DaemonSet of a known CNI (of want, when the
// nodes already named it) and the container that runs it.
func cniDaemonSet(dss []appsv1.DaemonSet, want string) (*appsv1.DaemonSet, *corev1.Container, *cniDaemon) {
	for i := range cniDaemons {
		k := &cniDaemons[i]
		if want != "" && k.name != want {
			continue
		}
		for j := range dss {
			ds := &dss[j]
			ctrs := ds.Spec.Template.Spec.Containers
			if len(ctrs) == 0 {
				continue
			}
			for c := range ctrs {
				if imageMatches(ctrs[c].Image, k.images) {
					return ds, &ctrs[c], k
				}
			}
			if slices.Contains(k.sets, ds.Name) {
				return ds, mainContainer(ctrs, ds.Name, k.name), k
			}
		}
	}
	return nil, nil, nil
}

// mainContainer is the container of a CNI's DaemonSet (found by its
// name) that runs the CNI: the one named like the DaemonSet or the CNI,
// else the first that is no pause container.
func mainContainer(ctrs []corev1.Container, set, cni string) *corev1.Container {
	for i := range ctrs {
		if n := ctrs[i].Name; n == set || strings.Contains(set, n) || strings.Contains(n, cni) {
			return &ctrs[i]
		}
	}
	for i := range ctrs {
		if !strings.HasSuffix(imageRepo(ctrs[i].Image), "pause") {
			return &ctrs[i]
		}
	}
	return &ctrs[0]
}

// imageRepo is an image reference without its registry host, tag or
// digest ("docker.io/flannel/flannel:v0.26.1" → "flannel/flannel").
func imageRepo(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	if first, rest, ok := strings.Cut(image, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		image = rest
	}
	return image
}

// imageMatches says whether image's repository is one of repos, or ends
// in one of them as whole path elements.
func imageMatches(image string, repos []string) bool {
	repo := imageRepo(image)
	for _, r := range repos {
		if repo == r || strings.HasSuffix(repo, "/"+r) {
			return true
		}
	}
	return false
}

// imageTag is an image's tag ("" for none or "latest"), its digest
// dropped.
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndex(image, ":")
	if i <= strings.LastIndex(image, "/") {
		return ""
	}
	if tag := image[i+1:]; tag != "latest" {
		return tag
	}
	return ""
}

// daemonMode is a CNI's mode as its DaemonSet's container configures it:
// Calico's pool environment, Cilium's routing and tunnel flags; else the
// CNI's one mode.
func daemonMode(k *cniDaemon, ctr *corev1.Container) string {
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	flags := map[string]string{}
	for _, a := range append(append([]string{}, ctr.Command...), ctr.Args...) {
		if name, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok && strings.HasPrefix(a, "--") {
			flags[name] = v
		}
	}
	encap := func(v string) bool { return v == "Always" || v == "CrossSubnet" }
	switch k.name {
	case "calico":
		switch {
		case encap(env["CALICO_IPV4POOL_VXLAN"]):
			return "vxlan"
		case encap(env["CALICO_IPV4POOL_IPIP"]):
			return "ipip"
		case env["CALICO_IPV4POOL_VXLAN"] == "Never" && env["CALICO_IPV4POOL_IPIP"] == "Never":
			return "direct"
		}
	case "cilium":
		switch {
		case flags["routing-mode"] == "native" || flags["tunnel"] == "disabled":
			return "native"
		case flags["tunnel-protocol"] != "":
			return flags["tunnel-protocol"]
		case flags["tunnel"] != "":
			return flags["tunnel"]
		}
	}
	return k.mode
}
