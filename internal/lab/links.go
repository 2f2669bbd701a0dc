package lab

import "fmt"

// Link roles, as suite.Network names them (the lab does not import
// suite; the strings are the contract).
const (
	LinkNodeUplink   = "node-uplink"   // node's eth0, towards the underlay
	LinkUnderlayPort = "underlay-port" // the underlay's end of a node's link
	LinkPodHost      = "pod-host"      // a pod's veth on its node's side
	LinkPod          = "pod"           // a pod's eth0
)

// Link returns the namespace name and device of a link of a node or pod
// (member "n1" or "n1-p1"; for host-network agents a node name): role is
// one of the Link* constants. It makes *Lab a suite.Network, so suites
// can put traffic control on the lab's links.
func (l *Lab) Link(role, member string) (netns, dev string, err error) {
	switch role {
	case LinkNodeUplink, LinkUnderlayPort:
		n, ok := l.Node(member)
		if !ok {
			return "", "", fmt.Errorf("lab %s has no node %q (nodes are n1 to n%d)", l.Name, member, len(l.Nodes))
		}
		if role == LinkNodeUplink {
			return n.NS, nodeUplink, nil
		}
		return l.Underlay.NS, underlayPort(n.Index), nil
	case LinkPodHost, LinkPod:
		p, ok := l.Pod(member)
		if !ok {
			return "", "", fmt.Errorf("lab %s has no pod %q (pods are like n1-p1)", l.Name, member)
		}
		if role == LinkPod {
			return p.NS, podDev, nil
		}
		n, _ := l.Node(p.Node)
		return n.NS, podHostDev(podIndex(p)), nil
	}
	return "", "", fmt.Errorf("unknown link role %q (want %s, %s, %s or %s)", role, LinkNodeUplink, LinkUnderlayPort, LinkPodHost, LinkPod)
}
