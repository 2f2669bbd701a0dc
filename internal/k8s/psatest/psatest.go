// Package psatest checks rendered objects against a Pod Security level
// with the checks of the API server's own PodSecurity admission
// (k8s.io/pod-security-admission/policy), so a test of the manifests,
// the Helm chart or `cnperf k8s deploy` cannot disagree with a cluster
// that enforces the level. It is for tests only.
package psatest

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Violations returns, for each pod template among objs (Deployments,
// DaemonSets, Pods), what the level ("restricted", "baseline") forbids,
// as "Kind/name: reason (detail)"; none when every pod is allowed.
func Violations(level string, objs []runtime.Object) ([]string, error) {
	lvl, err := psaapi.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("pod security level %q: %w", level, err)
	}
	ev, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		return nil, fmt.Errorf("pod security evaluator: %w", err)
	}
	lv := psaapi.LevelVersion{Level: lvl, Version: psaapi.LatestVersion()}
	var out []string
	for _, o := range objs {
		name, meta, spec := podOf(o)
		if spec == nil {
			continue
		}
		for _, r := range ev.EvaluatePod(lv, meta, spec) {
			if !r.Allowed {
				out = append(out, fmt.Sprintf("%s: %s (%s)", name, r.ForbiddenReason, r.ForbiddenDetail))
			}
		}
	}
	return out, nil
}

func podOf(o runtime.Object) (string, *metav1.ObjectMeta, *corev1.PodSpec) {
	switch x := o.(type) {
	case *appsv1.Deployment:
		return "Deployment/" + x.Name, &x.Spec.Template.ObjectMeta, &x.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return "DaemonSet/" + x.Name, &x.Spec.Template.ObjectMeta, &x.Spec.Template.Spec
	case *corev1.Pod:
		return "Pod/" + x.Name, &x.ObjectMeta, &x.Spec
	}
	return "", nil, nil
}
