package k8s

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Agent is a running agent pod.
type Agent struct {
	Name        string `json:"name"`
	UID         string `json:"uid"`
	IP          string `json:"ip"`
	Node        string `json:"node"`
	NodeIP      string `json:"node_ip"`
	Component   string `json:"component"` // pod, pod-b, host, shaped
	HostNetwork bool   `json:"host_network"`
	Ready       bool   `json:"ready"`
}

// Agents lists the agent pods that run, sorted by node then name.
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	pods, err := c.Kube.CoreV1().Pods(c.NS()).List(rctx, metav1.ListOptions{
		LabelSelector: AgentSelector, FieldSelector: "status.phase=Running"})
	if err != nil {
		return nil, c.explain(err, "list agent pods")
	}
	var out []Agent
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning { // fake clients ignore field selectors
			continue
		}
		out = append(out, Agent{
			Name: p.Name, UID: string(p.UID), IP: p.Status.PodIP, Node: p.Spec.NodeName,
			NodeIP: p.Status.HostIP, Component: p.Labels["app.kubernetes.io/component"],
			HostNetwork: p.Spec.HostNetwork, Ready: podReady(p),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Node is a cluster node as cnperf records it.
type Node struct {
	Name string `json:"name"`
	// Labels are the Node object's labels (plans by zone read them).
	Labels           map[string]string `json:"-"`
	InternalIP       string            `json:"internal_ip"`
	PodCIDRs         []string          `json:"pod_cidrs,omitempty"`
	Ready            bool              `json:"ready"`
	KubeletVersion   string            `json:"kubelet_version"`
	KernelVersion    string            `json:"kernel_version"`
	OSImage          string            `json:"os_image"`
	ContainerRuntime string            `json:"container_runtime"`
	Schedulable      bool              `json:"schedulable"`
	// CNI and CNIBackend are what a CNI daemon wrote on the Node object
	// (flannel's kube subnet manager: "flannel" and its backend-type
	// annotation, "vxlan" or "host-gw"; calico-node: "calico" and the
	// tunnel address it allocated, "vxlan", "ipip", or "direct" for none);
	// empty when none did.
	CNI        string `json:"cni,omitempty"`
	CNIBackend string `json:"cni_backend,omitempty"`
}

// flannelBackendAnnotation is set on every node by flannel's Kubernetes
// subnet manager to the backend it runs (vxlan, host-gw, ...).
const flannelBackendAnnotation = "flannel.alpha.coreos.com/backend-type"

// Annotations calico-node writes on the Node objects (Kubernetes
// datastore): its address, and the tunnel address of the encapsulation in
// use, if any.
const (
	calicoAddressAnnotation = "projectcalico.org/IPv4Address"
	calicoVXLANAnnotation   = "projectcalico.org/IPv4VXLANTunnelAddr"
	calicoIPIPAnnotation    = "projectcalico.org/IPv4IPIPTunnelAddr"
)

// Nodes lists the cluster's nodes, sorted by name.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	list, err := c.Kube.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		return nil, c.explain(err, "list nodes")
	}
	out := make([]Node, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, nodeOf(&list.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func nodeOf(n *corev1.Node) Node {
	out := Node{Name: n.Name, Labels: n.Labels, PodCIDRs: n.Spec.PodCIDRs, Schedulable: !n.Spec.Unschedulable,
		KubeletVersion: n.Status.NodeInfo.KubeletVersion, KernelVersion: n.Status.NodeInfo.KernelVersion,
		OSImage: n.Status.NodeInfo.OSImage, ContainerRuntime: n.Status.NodeInfo.ContainerRuntimeVersion}
	if b := n.Annotations[flannelBackendAnnotation]; b != "" {
		out.CNI, out.CNIBackend = "flannel", b
	} else if n.Annotations[calicoAddressAnnotation] != "" {
		out.CNI, out.CNIBackend = "calico", "direct"
		switch {
		case n.Annotations[calicoVXLANAnnotation] != "":
			out.CNIBackend = "vxlan"
		case n.Annotations[calicoIPIPAnnotation] != "":
			out.CNIBackend = "ipip"
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && out.InternalIP == "" {
			out.InternalIP = a.Address
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return out
}

// Node returns one node; a name that does not exist is an error that lists
// the nodes there are (the seed's tool left pods for such nodes Pending
// forever).
func (c *Client) Node(ctx context.Context, name string) (Node, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	n, err := c.Kube.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		names := "none"
		if all, lerr := c.Nodes(ctx); lerr == nil && len(all) > 0 {
			var ns []string
			for _, x := range all {
				ns = append(ns, x.Name)
			}
			names = strings.Join(ns, ", ")
		}
		return Node{}, fmt.Errorf("node %q does not exist (nodes: %s)", name, names)
	}
	if err != nil {
		return Node{}, c.explain(err, "get node "+name)
	}
	nd := nodeOf(n)
	if !nd.Ready {
		return nd, fmt.Errorf("node %q is not Ready", name)
	}
	if !nd.Schedulable {
		return nd, fmt.Errorf("node %q is cordoned (unschedulable)", name)
	}
	return nd, nil
}
