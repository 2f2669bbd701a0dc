package k8s

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/suite"
)

// AgentSets says which opt-in agent sets are deployed: the default
// install runs pod agents under Pod Security restricted (no capabilities,
// no host network), and what needs more comes from these.
type AgentSets struct {
	// Host: a host-network agent DaemonSet is deployed (--host-agents):
	// the node-to-node rows, and a namespace where host-network pods
	// (the inspectors that read a node's qdiscs) are allowed.
	Host bool `json:"host"`
	// QoS: the agents have NET_ADMIN (--qos-agents): qdiscs on a pod's or
	// a node's interface, and detect pods that try the police action.
	QoS bool `json:"qos"`
}

// The refusals of what an opt-in agent set gives, naming the option.
const (
	qosAgentsWhy = "a qdisc on a pod's interface is put there by the pod's own agent, which needs NET_ADMIN; " +
		"the default install's agents have no capabilities: deploy with --qos-agents (Helm: qosAgents=true)"
	hostQoSAgentsWhy = "a qdisc on a node's interface is put there by the node's host-network agent with NET_ADMIN: " +
		"deploy with --host-agents --qos-agents (Helm: hostAgents=true, qosAgents=true), then opt in with --set " +
		suite.SetAllowNodeQdisc + "=true"
	hostVXLANAgentsWhy = "tos inherit on a node's VXLAN devices is set by the node's host-network agent with NET_ADMIN: " +
		"deploy with --host-agents --qos-agents (Helm: hostAgents=true, qosAgents=true), then opt in with --set " +
		suite.SetAllowNodeQdisc + "=true"
	hostAgentsWhy = "reading back the qdiscs the CNI installed for a shaped pod takes an inspector pod in the node's " +
		"network namespace (host network, the CNI configuration read-only), which Pod Security restricted refuses: " +
		"deploy with --host-agents (Helm: hostAgents=true)"
	inspectWhy = "inspecting a node takes a host-network pod, which Pod Security restricted refuses: deploy with --host-agents"
)

// AgentSets reads which opt-in agent sets the deployed DaemonSets show: a
// host-network one, and NET_ADMIN added to the pod agent's container.
func (c *Client) AgentSets(ctx context.Context) (AgentSets, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	dss, err := c.Kube.AppsV1().DaemonSets(c.NS()).List(rctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return AgentSets{}, c.explain(err, "list daemonsets")
	}
	var s AgentSets
	for _, ds := range dss.Items {
		ps := ds.Spec.Template.Spec
		if ps.HostNetwork {
			s.Host = true
			continue
		}
		if ds.Name != "cnperf-agent" || len(ps.Containers) == 0 {
			continue
		}
		if sc := ps.Containers[0].SecurityContext; sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
			s.QoS = true
		}
	}
	return s, nil
}
