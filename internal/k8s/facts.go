package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultCNIConfDir is where kubelet's runtime reads CNI configuration.
const DefaultCNIConfDir = "/etc/cni/net.d"

// AgentTemplate returns the agent container of the deployed cnperf-agent
// DaemonSet, so test pods run exactly the image and settings users deployed.
func (c *Client) AgentTemplate(ctx context.Context) (corev1.Container, error) {
	ps, err := c.agentPodSpec(ctx)
	if err != nil {
		return corev1.Container{}, err
	}
	return ps.Containers[0], nil
}

// agentPodSpec returns the pod template's spec of the deployed
// cnperf-agent DaemonSet (with at least one container).
func (c *Client) agentPodSpec(ctx context.Context) (corev1.PodSpec, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	ds, err := c.Kube.AppsV1().DaemonSets(c.NS()).Get(rctx, "cnperf-agent", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return corev1.PodSpec{}, fmt.Errorf("daemonset cnperf-agent not found: run `cnperf k8s deploy` first")
	}
	if err != nil {
		return corev1.PodSpec{}, c.explain(err, "get daemonset cnperf-agent")
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return corev1.PodSpec{}, fmt.Errorf("daemonset cnperf-agent has no container")
	}
	return ds.Spec.Template.Spec, nil
}

// InspectNode runs a short-lived inspector pod in node's network namespace
// and returns what it found. ifindex > 0 limits the qdisc report to that
// link (and where its filters redirect); cniConfDir is the node's CNI
// configuration directory ("" for DefaultCNIConfDir).
func (c *Client) InspectNode(ctx context.Context, node string, ifindex int, cniConfDir string, timeout time.Duration) (NodeReport, error) {
	var r NodeReport
	tmpl, err := c.AgentTemplate(ctx)
	if err != nil {
		return r, err
	}
	if cniConfDir == "" {
		cniConfDir = DefaultCNIConfDir
	}
	name := fmt.Sprintf("cnperf-inspect-%s", shortID())
	args := []string{"k8s", "inspect-node", "--cni-conf-dir", "/host/cni"}
	if ifindex > 0 {
		args = append(args, "--ifindex", strconv.Itoa(ifindex))
	}
	t := TestPod{
		Name: name, Node: node, HostNetwork: true, OneShot: true,
		Labels: map[string]string{"app.kubernetes.io/name": "cnperf-inspector"},
		Container: corev1.Container{
			Name: "inspect", Image: tmpl.Image, ImagePullPolicy: tmpl.ImagePullPolicy, Args: args,
			VolumeMounts: []corev1.VolumeMount{{Name: "cni", MountPath: "/host/cni", ReadOnly: true}},
			Env: []corev1.EnvVar{{Name: "NODE_IP", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		},
		Volumes: []corev1.Volume{{Name: "cni", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: cniConfDir, Type: ptrTo(corev1.HostPathDirectory)}}}},
	}
	p, err := c.RunPod(ctx, t, timeout)
	if err != nil {
		return r, fmt.Errorf("inspect node %s: %w", node, err)
	}
	defer c.DeletePod(context.WithoutCancel(ctx), name) //nolint:errcheck // best effort; the namespace removal catches leftovers
	msg := ""
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			msg = cs.State.Terminated.Message
		}
	}
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return r, fmt.Errorf("inspect node %s: inspector's answer %q: %w", node, truncate(msg, 200), err)
	}
	return r, nil
}

// Facts are the cluster's facts recorded with every run on Kubernetes.
type Facts struct {
	KubernetesVersion string `json:"kubernetes_version"`
	Nodes             []Node `json:"nodes"`
	CNI               string `json:"cni"`
	// CNIName is the CNI alone ("flannel", "calico", "bridge"): from the
	// Node objects a CNI daemon annotated, else a known CNI DaemonSet,
	// else the first plugin of the runtime's CNI configuration. Rows of a
	// run carry it as `cni`.
	CNIName string `json:"cni_name,omitempty"`
	// Backend is the CNI's datapath mode where the CNI says it ("vxlan",
	// "host-gw", "direct"); rows carry it as `backend`.
	Backend string `json:"backend,omitempty"`
	// CNIVersion is the CNI's release where the cluster says it (Calico:
	// its ClusterInformation's calicoVersion, which the ClusterRole
	// cnperf-cluster-reader may get; an identity that may not leaves it
	// empty); rows carry it as `cni_version`.
	CNIVersion string `json:"cni_version,omitempty"`
	ProxyMode  string `json:"kube_proxy_mode"`
	PodMTU     int    `json:"pod_mtu,omitempty"`
	NodeMTU    int    `json:"node_mtu,omitempty"`
	Kernel     string `json:"kernel"`
}

// knownCNIs are DaemonSets (in kube-system or their own namespace) that
// name the CNI in use.
var knownCNIs = []struct{ ns, name, cni string }{
	{"kube-system", "calico-node", "calico"}, {"calico-system", "calico-node", "calico"},
	{"kube-system", "cilium", "cilium"}, {"kube-flannel", "kube-flannel-ds", "flannel"},
	{"kube-system", "kube-flannel-ds", "flannel"}, {"kube-system", "antrea-agent", "antrea"},
	{"kube-system", "weave-net", "weave"}, {"kube-system", "kindnet", "kindnet"},
}

// Facts gathers the cluster's facts: the API server's version, the nodes
// (kernel, kubelet, runtime), the CNI (a known CNI DaemonSet, else the
// runtime's CNI configuration read on the first agent node), kube-proxy's
// mode and the MTUs (read on that node by an inspector pod, a host-network
// pod that runs only where the host-agents opt-in is deployed).
func (c *Client) Facts(ctx context.Context, cniConfDir string, timeout time.Duration) (Facts, error) {
	var f Facts
	v, err := c.ServerVersion(ctx)
	if err != nil {
		return f, err
	}
	f.KubernetesVersion = v.GitVersion
	if f.Nodes, err = c.Nodes(ctx); err != nil {
		return f, err
	}
	kernels := map[string]bool{}
	for _, n := range f.Nodes {
		if !kernels[n.KernelVersion] {
			kernels[n.KernelVersion] = true
			f.Kernel = strings.TrimPrefix(f.Kernel+", "+n.KernelVersion, ", ")
		}
	}
	f.CNIName, f.Backend = cniOfNodes(f.Nodes)
	if f.CNIName != "" {
		f.CNI = f.CNIName
	}
	if f.CNIName == "calico" {
		f.CNIVersion = c.calicoVersion(ctx)
	}
	for _, k := range knownCNIs {
		if f.CNI != "" {
			break
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		_, err := c.Kube.AppsV1().DaemonSets(k.ns).Get(rctx, k.name, metav1.GetOptions{})
		cancel()
		if err == nil {
			f.CNI, f.CNIName = k.cni, k.cni
			break
		}
	}
	agents, err := c.Agents(ctx)
	if err != nil {
		return f, err
	}
	var node string
	for _, a := range agents {
		if !a.HostNetwork {
			node = a.Node
			break
		}
	}
	if node == "" {
		return f, fmt.Errorf("no running agent pod to find a node to inspect: is cnperf deployed and ready?")
	}
	sets, err := c.AgentSets(ctx)
	if err != nil {
		return f, err
	}
	if !sets.Host {
		// Under Pod Security restricted no inspector may run: what only a
		// node's own network namespace tells stays unknown, and says why.
		f.ProxyMode = "unknown: " + inspectWhy
		if f.CNI == "" {
			f.CNI = "unknown: " + inspectWhy
		}
		return f, nil
	}
	r, err := c.InspectNode(ctx, node, 0, cniConfDir, timeout)
	if err != nil {
		return f, err
	}
	f.ProxyMode, f.PodMTU, f.NodeMTU = r.ProxyMode, r.VethMTU, r.NodeMTU
	if r.CNI != nil {
		desc := fmt.Sprintf("%s (%s: %s)", r.CNI.Name, r.CNI.File, strings.Join(r.CNI.Plugins, ", "))
		if f.CNIName == "" && len(r.CNI.Plugins) > 0 {
			f.CNIName = r.CNI.Plugins[0]
		}
		if f.CNIName == "cilium-cni" || f.CNIName == "cilium" {
			f.CNIName, f.Backend = "cilium", ciliumBackend(r.Tunnels)
			if f.CNI == "" {
				f.CNI = "cilium"
			}
		}
		if f.CNI == "" {
			f.CNI = desc
		} else {
			f.CNI += "; " + desc
		}
	} else if f.CNI == "" {
		f.CNI = "unknown: " + r.CNIError
	}
	return f, nil
}

// ciliumBackend is Cilium's routing mode as its datapath shows it on the
// inspected node: "vxlan" when its tunnel device cilium_vxlan is there,
// else "native" (routing the pod CIDRs unencapsulated). Cilium writes its
// mode only into its own ConfigMap and agent state, which cnperf's
// cluster-reader role does not read.
func ciliumBackend(tunnels []string) string {
	if slices.Contains(tunnels, "cilium_vxlan") {
		return "vxlan"
	}
	return "native"
}

// calicoVersion is the calicoVersion of Calico's ClusterInformation
// "default" (calico-node's startup writes its release there), or "" when
// it cannot be read: the version is a fact worth having, not a reason to
// fail a run.
func (c *Client) calicoVersion(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	b, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/apis/crd.projectcalico.org/v1/clusterinformations/default").DoRaw(rctx)
	if err != nil {
		return ""
	}
	var ci struct {
		Spec struct {
			CalicoVersion string `json:"calicoVersion"`
		} `json:"spec"`
	}
	if json.Unmarshal(b, &ci) != nil {
		return ""
	}
	return ci.Spec.CalicoVersion
}

// cniOfNodes is the CNI and backend the nodes' annotations name, when every
// annotated node agrees on them ("flannel", "vxlan"); a mix of backends is
// reported as such.
func cniOfNodes(nodes []Node) (cni, backend string) {
	seen := map[string]bool{}
	var backends []string
	for _, n := range nodes {
		if n.CNI == "" {
			continue
		}
		cni = n.CNI
		if !seen[n.CNIBackend] {
			seen[n.CNIBackend] = true
			backends = append(backends, n.CNIBackend)
		}
	}
	return cni, strings.Join(backends, "+")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
