package k8s

import (
	"context"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// Environment implements suite.Describer from the Node objects: each
// node's kernel, OS image, CPUs and memory as the kubelet reports them,
// and the CNI and its mode where a CNI daemon wrote them on the nodes.
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
	for i := range list.Items {
		n := &list.Items[i]
		node := nodeOf(n)
		if env.CNI == "" && node.CNI != "" {
			env.CNI, env.Backend = node.CNI, node.CNIBackend
		}
		hn := hostinfo.Node{Name: n.Name, Kernel: node.KernelVersion, OSImage: node.OSImage}
		if q, ok := n.Status.Capacity["cpu"]; ok {
			hn.CPUs = int(q.Value())
		}
		if q, ok := n.Status.Capacity["memory"]; ok && q.Value() > 0 {
			hn.MemoryBytes = uint64(q.Value())
		}
		env.Nodes = append(env.Nodes, hn)
	}
	sort.Slice(env.Nodes, func(i, j int) bool { return env.Nodes[i].Name < env.Nodes[j].Name })
	return env, nil
}
