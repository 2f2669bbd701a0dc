package k8s

import (
	"context"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// Environment implements suite.Describer from the Node objects: each
// node's kernel, OS image, CPUs and memory as the kubelet reports them,
// and the CNI with its version and mode (the session's facts, else
// DetectCNI from the API alone).
// MTUs, congestion control and offloads would need a privileged look
// inside every node, which a suite run does not take; a note says so.
func (e *Env) Environment(ctx context.Context) (*hostinfo.Environment, error) {
	rctx, cancel := context.WithTimeout(ctx, e.Client.timeout())
	defer cancel()
	list, err := e.Client.Kube.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		return nil, e.Client.explain(err, "list nodes")
	}
	env := &hostinfo.Environment{Platform: "kubernetes",
		Notes: []string{"on a cluster the MTUs, congestion control and offloads of the nodes are not read (see cnperf k8s status --facts)"}}
	nodes := make([]Node, 0, len(list.Items))
	for i := range list.Items {
		n := &list.Items[i]
		node := nodeOf(n)
		nodes = append(nodes, node)
		hn := hostinfo.Node{Name: n.Name, Kernel: node.KernelVersion, OSImage: node.OSImage}
		if q, ok := n.Status.Capacity["cpu"]; ok {
			hn.CPUs = int(q.Value())
		}
		if q, ok := n.Status.Capacity["memory"]; ok && q.Value() > 0 {
			hn.MemoryBytes = uint64(q.Value())
		}
		env.Nodes = append(env.Nodes, hn)
	}
	cni := e.CNI
	if cni.Name == "" {
		cni = e.Client.DetectCNI(ctx, nodes, nil)
	}
	env.CNI, env.CNIVersion, env.Backend = cni.Name, cni.Version, cni.Mode
	if len(cni.From) > 0 {
		env.Notes = append(env.Notes, "CNI from "+strings.Join(cni.From, ", "))
	}
	if why := cni.MissingVersion(); why != "" {
		env.Notes = append(env.Notes, why)
	}
	sort.Slice(env.Nodes, func(i, j int) bool { return env.Nodes[i].Name < env.Nodes[j].Name })
	return env, nil
}
