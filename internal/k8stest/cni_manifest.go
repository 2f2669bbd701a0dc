package k8stest

import (
	"context"
	"fmt"
	"net/http"
)

// The harness runs Flannel's and Cilium's daemons as processes it
// supervises in each node's namespace (their images cannot be pulled
// here), so the API would show no DaemonSet and no ConfigMap of them,
// where a cluster installed from the CNI's own manifest shows both and
// cnperf reads the CNI's version (the image tag) and Cilium's mode (its
// ConfigMap) from them. manifestObjects are those objects as the CNI's
// manifest names them, applied so the API shows what a real cluster
// does. The DaemonSet's pods are kept off the nodes by a node selector no
// node matches (noNodeSelector): the daemons the harness runs are the
// CNI.

// noNodeSelector matches no node of the harness.
var noNodeSelector = map[string]string{"k8stest.cnperf.io/daemon-runs-as-harness-process": "true"}

// cniManifest is what a CNI's own manifest installs that cnperf reads.
type cniManifest struct {
	ns          string
	daemonSet   string
	container   string
	image       string
	labels      map[string]string
	command     []string
	args        []string
	configMap   string
	configMapFn func() map[string]string // the ConfigMap's data, now
}

// apply creates the namespace, the DaemonSet and the ConfigMap (or
// replaces the ConfigMap's data: the backend changed).
func (m cniManifest) apply(ctx context.Context, c *Cluster) error {
	if m.ns != "kube-system" {
		if err := c.apiDo(ctx, http.MethodPost, "/api/v1/namespaces", map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": m.ns, "labels": m.labels}}, nil); err != nil {
			return fmt.Errorf("namespace %s: %w", m.ns, err)
		}
	}
	if m.configMap != "" {
		if err := m.applyConfigMap(ctx, c); err != nil {
			return err
		}
	}
	ctr := map[string]any{"name": m.container, "image": m.image, "imagePullPolicy": "IfNotPresent", "command": m.command, "args": m.args,
		"securityContext": map[string]any{"privileged": true}}
	ds := map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": m.daemonSet, "namespace": m.ns, "labels": m.labels,
			"annotations": map[string]string{"k8stest.cnperf.io/note": "the harness runs this CNI's daemon as a process in each node's namespace; this DaemonSet is the CNI's manifest as applied, its pods kept off the nodes"}},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": m.labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": m.labels},
				"spec": map[string]any{"hostNetwork": true, "nodeSelector": noNodeSelector,
					"tolerations": []any{map[string]any{"operator": "Exists", "effect": "NoSchedule"}},
					"containers":  []any{ctr}},
			},
		},
	}
	if err := c.apiDo(ctx, http.MethodPost, "/apis/apps/v1/namespaces/"+m.ns+"/daemonsets", ds, nil); err != nil {
		return fmt.Errorf("daemonset %s/%s: %w", m.ns, m.daemonSet, err)
	}
	return nil
}

// applyConfigMap writes the ConfigMap with its data now.
func (m cniManifest) applyConfigMap(ctx context.Context, c *Cluster) error {
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": m.configMap, "namespace": m.ns, "labels": m.labels}, "data": m.configMapFn()}
	path := "/api/v1/namespaces/" + m.ns + "/configmaps"
	var got map[string]any
	if err := c.apiDo(ctx, http.MethodPost, path, cm, &got); err != nil {
		// There already (a backend switch): replace it.
		if err := c.apiDo(ctx, http.MethodPut, path+"/"+m.configMap, cm, nil); err != nil {
			return fmt.Errorf("configmap %s/%s: %w", m.ns, m.configMap, err)
		}
	}
	return nil
}
