package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cnperf/cnperf/internal/k8s/psatest"
)

// TestChartDefaultsLeastPrivilege is issue 31's check of `helm template
// deploy/helm/cnperf` with default values: no image tagged latest (or
// untagged), no NET_ADMIN (no added capability at all), no host network,
// no privileged container, a namespace (when the chart makes one)
// labelled restricted and never privileged, and every pod admitted by
// Pod Security restricted. The opt-ins hostAgents and qosAgents are shown
// to trip each finding, so the check is one that can fail.
func TestChartDefaultsLeastPrivilege(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want []string // findings expected (substrings); none for the defaults
	}{
		{"default values", nil, nil},
		{"default values, namespace made", []string{"namespace.create=true"}, nil},
		{"opt-ins", []string{"namespace.create=true", "hostAgents=true", "qosAgents=true"},
			[]string{"hostNetwork", "adds capability NET_ADMIN", "pod-security.kubernetes.io/enforce=privileged", "Pod Security restricted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			got := leastPrivilegeFindings(t, objs)
			if tc.want == nil {
				if len(got) > 0 {
					t.Errorf("helm template %v:\n%s", tc.sets, strings.Join(got, "\n"))
				}
				return
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, w) }) {
					t.Errorf("helm template %v: no finding %q among:\n%s", tc.sets, w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// leastPrivilegeFindings lists what in objs is more than Pod Security
// restricted allows or runs an image tagged latest.
func leastPrivilegeFindings(t *testing.T, objs map[string]runtime.Object) []string {
	t.Helper()
	var out, workloads []string
	var list []runtime.Object
	for k, o := range objs {
		list = append(list, o)
		var ps *corev1.PodSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps = &x.Spec.Template.Spec
		case *appsv1.DaemonSet:
			ps = &x.Spec.Template.Spec
		case *corev1.Namespace:
			for _, l := range []string{"pod-security.kubernetes.io/enforce", "pod-security.kubernetes.io/warn"} {
				if v := x.Labels[l]; v != "restricted" {
					out = append(out, fmt.Sprintf("%s: %s=%s", k, l, v))
				}
			}
		}
		if ps == nil {
			continue
		}
		workloads = append(workloads, k)
		if ps.HostNetwork {
			out = append(out, k+": hostNetwork")
		}
		for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
			name := c.Image[strings.LastIndex(c.Image, "/")+1:]
			if (!strings.Contains(name, ":") && !strings.Contains(name, "@")) || strings.HasSuffix(name, ":latest") {
				out = append(out, fmt.Sprintf("%s: container %s runs %q (latest)", k, c.Name, c.Image))
			}
			sc := c.SecurityContext
			if sc == nil {
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				out = append(out, fmt.Sprintf("%s: container %s privileged", k, c.Name))
			}
			if sc.Capabilities != nil {
				for _, cp := range sc.Capabilities.Add {
					out = append(out, fmt.Sprintf("%s: container %s adds capability %s", k, c.Name, cp))
				}
			}
		}
	}
	if len(workloads) == 0 {
		t.Fatal("helm template rendered no Deployment or DaemonSet")
	}
	bad, err := psatest.Violations("restricted", list)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		out = append(out, "Pod Security restricted: "+b)
	}
	slices.Sort(out)
	return out
}
