package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	if errors.Is(err, ErrHostPathMissing) {
		return r, fmt.Errorf("inspect node %s: the node has no CNI configuration directory %s: pass --cni-conf-dir with the nodes' own: %w", node, cniConfDir, err)
	}
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
	// CNIName is the CNI alone ("flannel", "calico", "bridge"), as
	// DetectCNI names it. Rows of a run carry it as `cni`.
	CNIName string `json:"cni_name,omitempty"`
	// Backend is the CNI's datapath mode where the CNI says it ("vxlan",
	// "host-gw", "direct"); rows carry it as `backend`.
	Backend string `json:"backend,omitempty"`
	// CNIVersion is the CNI's release where the cluster says it (Calico's
	// ClusterInformation, else the tag of the CNI DaemonSet's image; the
	// ClusterRole cnperf-cluster-reader may read both; an identity that
	// may not leaves it empty); rows carry it as `cni_version`.
	CNIVersion string `json:"cni_version,omitempty"`
	// CNIFrom says where the CNI's name, version and mode were read.
	CNIFrom   []string `json:"cni_from,omitempty"`
	ProxyMode string   `json:"kube_proxy_mode"`
	PodMTU    int      `json:"pod_mtu,omitempty"`
	NodeMTU   int      `json:"node_mtu,omitempty"`
	Kernel    string   `json:"kernel"`
	// MetadataTunnels are the inspected node's VXLAN devices in metadata
	// mode (NodeReport.MetadataTunnels).
	MetadataTunnels []string `json:"metadata_tunnels,omitempty"`
}

// Facts gathers the cluster's facts: the API server's version, the nodes
// (kernel, kubelet, runtime), the CNI (DetectCNI: the nodes' annotations,
// the CNI's DaemonSet, and the runtime's CNI configuration read on the
// first agent node), kube-proxy's mode and the MTUs (read on that node by
// an inspector pod, a host-network pod that runs only where the
// host-agents opt-in is deployed).
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
	var rp *NodeReport
	if sets.Host {
		r, err := c.InspectNode(ctx, node, 0, cniConfDir, timeout)
		if err != nil {
			return f, err
		}
		rp = &r
		f.ProxyMode, f.PodMTU, f.NodeMTU = r.ProxyMode, r.VethMTU, r.NodeMTU
		f.MetadataTunnels = r.MetadataTunnels
	} else {
		// Under Pod Security restricted no inspector may run: what only a
		// node's own network namespace tells stays unknown, and says why.
		f.ProxyMode = "unknown: " + inspectWhy
	}
	cni := c.DetectCNI(ctx, f.Nodes, rp)
	f.CNIName, f.Backend, f.CNIVersion, f.CNIFrom = cni.Name, cni.Mode, cni.Version, cni.From
	f.CNI = cni.Name
	switch {
	case rp != nil && rp.CNI != nil:
		desc := fmt.Sprintf("%s (%s: %s)", rp.CNI.Name, rp.CNI.File, strings.Join(rp.CNI.Plugins, ", "))
		f.CNI = strings.TrimPrefix(f.CNI+"; "+desc, "; ")
	case f.CNI != "":
	case rp != nil:
		f.CNI = "unknown: " + rp.CNIError
	default:
		f.CNI = "unknown: " + inspectWhy
	}
	return f, nil
}

// calicoVersion is the calicoVersion of Calico's ClusterInformation
// "default" (calico-node's startup writes its release there), or "" when
// it cannot be read: the version is a fact worth having, not a reason to
// fail a run.
func (c *Client) calicoVersion(ctx context.Context) string {
	if c.Dynamic == nil {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	u, err := c.Dynamic.Resource(clusterInformations).Get(rctx, "default", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "calicoVersion")
	return v
}

// clusterInformations is Calico's ClusterInformation resource.
var clusterInformations = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "clusterinformations"}

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
