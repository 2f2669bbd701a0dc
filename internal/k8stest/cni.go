package k8stest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// CNI gives the harness's pods their network. Up runs its Install once
// kubelets run and the controller-manager has given every node a pod CIDR
// (Node.PodCIDR is set), before kube-proxy starts; Down stops what it
// started (processes through Cluster.start, devices with the nodes'
// namespaces). Each CNI is one file: cni_bridge.go, cni_flannel.go,
// cni_calico.go, cni_cilium.go.
type CNI interface {
	// Install starts the CNI on every node and writes each node's CNI
	// configuration into Node.CNIDir.
	Install(ctx context.Context, c *Cluster) error
	// Backends are the datapath modes the CNI runs on this kernel, in the
	// order the test runs them; Install starts the first.
	Backends() []string
	// SwitchBackend moves the running CNI to another of its Backends in
	// place, on the same cluster. Pods made before keep their old network:
	// the caller recreates them.
	SwitchBackend(ctx context.Context, c *Cluster, backend string) error
	// Facts say which CNI this is, as `cnperf k8s status --facts` and the
	// rows of a run on this cluster must name it.
	Facts() CNIFacts
}

// runtimeEnver is a CNI whose plugins need more in the container
// runtime's environment (the runtime passes its own to the plugins it
// runs): Cilium's socket per node.
type runtimeEnver interface {
	RuntimeEnv(c *Cluster, n *Node) []string
}

// CNIFacts describe a CNI as cnperf's cluster facts report it.
type CNIFacts struct {
	// Name is the CNI ("bridge", "flannel"), the rows' `cni`.
	Name string
	// Backend is its datapath mode ("vxlan", "host-gw"; "" for none), the
	// rows' `backend`.
	Backend string
	// Version is the CNI's release ("" for the harness's own).
	Version string
	// PodMTU is the MTU the CNI gives pods (0 when it does not say).
	PodMTU int
	// Plugins are the CNI plugins its configuration chains.
	Plugins []string
}

// refusedCNIs are CNIs the harness refuses up front, with the reason.
var refusedCNIs = map[string]string{
	"antrea": "Antrea's datapath is Open vSwitch's kernel module (openvswitch), which this kernel lacks; and the Go module proxy serves no version of antrea.io/antrea to build it from",
}

// CNINamed is the harness CNI of that name (CNPERF_K8S_CNI; "" is
// flannel), on its first backend. CNIs and backends this kernel cannot run
// are refused with the reason ("calico-ipip" asks for Calico's IP-in-IP).
func CNINamed(name string) (CNI, error) {
	if why, ok := refusedCNIs[name]; ok {
		return nil, fmt.Errorf("CNI %q refused: %s", name, why)
	}
	switch name {
	case "", "flannel":
		return &Flannel{Backend: FlannelBackends[0]}, nil
	case "calico":
		return &Calico{Backend: CalicoBackends[0]}, nil
	case "cilium":
		return &Cilium{Backend: CiliumBackends[0]}, nil
	case "bridge":
		return Bridge{}, nil
	}
	if cni, backend, ok := strings.Cut(name, "-"); ok && cni == "calico" {
		if err := checkCalicoBackend(backend); err != nil {
			return nil, err
		}
	}
	if cni, backend, ok := strings.Cut(name, "-"); ok && cni == "cilium" {
		if err := checkCiliumBackend(backend); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("CNI %q: the harness runs flannel, calico, cilium or bridge", name)
}

func (f CNIFacts) String() string {
	if f.Backend == "" {
		return f.Name
	}
	return f.Name + " " + f.Backend
}

// podNetwork waits for the controller-manager to give each node a pod
// CIDR and installs the cluster's CNI.
func (c *Cluster) podNetwork(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := c.poll(ctx, n.Name+" registered with a pod CIDR", 3*time.Minute, func() error {
			var node struct {
				Spec struct {
					PodCIDR string `json:"podCIDR"`
				} `json:"spec"`
			}
			if err := c.getJSON(ctx, "/api/v1/nodes/"+n.Name, &node); err != nil {
				return err
			}
			if node.Spec.PodCIDR == "" {
				return errors.New("no pod CIDR yet")
			}
			n.PodCIDR = node.Spec.PodCIDR
			return nil
		})
		if err != nil {
			return err
		}
	}
	return c.CNI.Install(ctx, c)
}

// routeRootToPods routes each node's pod CIDR from the root namespace (the
// API server's) via the node's IP, so the control plane reaches pods
// whatever the CNI; nothing beyond the harness's veth is touched.
func (c *Cluster) routeRootToPods(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := run(ctx, "ip", "route", "replace", n.PodCIDR, "via", n.IP, "dev", rootVeth); err != nil {
			return fmt.Errorf("route to %s's pods: %w", n.Name, err)
		}
	}
	return nil
}
