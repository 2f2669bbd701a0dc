// Package k8s runs cnperf on a real Kubernetes cluster through client-go:
// it applies and removes the manifests of deploy/kubernetes, finds the
// agents and nodes, places short-lived test pods on chosen nodes (with the
// CNI bandwidth annotations for the shaping suite), reads back the qdiscs
// the CNI installed and records the cluster's facts with a run.
//
// Every call takes a context and every API request has a timeout, so a
// missing kubeconfig, an unreachable API server, missing RBAC or a node that
// does not exist end in an error that names the problem, never in a hang.
// It needs a kubeconfig (or in-cluster credentials) whose user may do what
// deploy/kubernetes/base/rbac.yaml lists.
package k8s
