// Package k8stest brings up a real two-node Kubernetes cluster on this
// machine for cnperf's tests, and tears it down again: etcd, the API
// server, controller-manager and scheduler in the root network namespace,
// and per node a network namespace with its own containerd, kubelet and
// kube-proxy. The nodes meet on a bridge in a namespace of their own; the
// root namespace reaches them through one veth. Nothing is routed off the
// machine.
//
// Up runs a list of stages (network, PKI, etcd, control plane, nodes, CNI,
// kube-proxy) and tears everything down when one fails. The pod network is
// a CNI (interface CNI: Install, Facts), one file each: cni_bridge.go (the
// harness's own conflist and routes), cni_flannel.go.
//
// The Kubernetes binaries and CNI plugins come from test/k8s/build.sh
// (built from Go modules, cached). Images are tarballs imported with ctr,
// except in the registry check (registry.go): an in-process registry on
// the harness's network that refuses anonymous requests, which the
// nodes' containerd reach over HTTP (hosts.toml under config_path) and
// pull cnperf's pushed image from with the pull Secret's credentials.
// Up records what it changed (sysctls kubelet sets
// host-wide, namespaces, cgroups, mounts, processes) and Down undoes all of
// it, also after a failed Up and for leftovers of a crashed run. It needs
// root, etcd, containerd, runc, ctr, iptables and nsenter (see
// K8S-FACTS in docs/kubernetes.md).
package k8stest
