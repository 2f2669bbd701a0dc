package helm

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartAgentsReportZone: every agent DaemonSet (pod agents, the
// host-network one, with or without NET_ADMIN) passes the node's zone and
// region from its pod's topology labels (Downward API) to the agent;
// agents.nodeLabels adds fixed labels as CNPERF_NODE_LABELS; and no
// binding gives the agents' account any role, so agents still cannot read
// Nodes.
func TestChartAgentsReportZone(t *testing.T) {
	fieldOf := map[string]string{
		"CNPERF_ZONE":   "metadata.labels['topology.kubernetes.io/zone']",
		"CNPERF_REGION": "metadata.labels['topology.kubernetes.io/region']",
	}
	for _, sets := range [][]string{
		{"agents.perNode=3", "hostAgents=true", "qosAgents=true", "agents.nodeLabels.rack=r7", "agents.nodeLabels.topology\\.kubernetes\\.io/zone=lab-1"},
		{"hostAgents=true"},
	} {
		objs := render(t, sets...)
		wantLabels := ""
		if len(sets) > 1 {
			wantLabels = "rack=r7,topology.kubernetes.io/zone=lab-1"
		}
		n := 0
		for k, o := range objs {
			switch x := o.(type) {
			case *appsv1.DaemonSet:
				n++
				env := map[string]corev1.EnvVar{}
				for _, e := range x.Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e
				}
				for name, fp := range fieldOf {
					if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != fp {
						t.Errorf("%v: %s: env %s must come from the Downward API field %s, got %+v", sets, k, name, fp, e)
					}
				}
				if got := env["CNPERF_NODE_LABELS"].Value; got != wantLabels {
					t.Errorf("%v: %s: CNPERF_NODE_LABELS %q, want %q", sets, k, got, wantLabels)
				}
			case *rbacv1.RoleBinding:
				for _, s := range x.Subjects {
					if s.Name == "cnperf-agent" {
						t.Errorf("%s binds the agents' account: agents need no API access", k)
					}
				}
			case *rbacv1.ClusterRoleBinding:
				for _, s := range x.Subjects {
					if s.Name == "cnperf-agent" {
						t.Errorf("%s binds the agents' account: agents need no API access", k)
					}
				}
			}
		}
		if want := 1 + map[bool]int{true: 3, false: 2}[len(sets) > 1]; n != want {
			t.Errorf("%v: %d DaemonSets, want %d", sets, n, want)
		}
	}
	for _, bad := range []string{"agents.nodeLabels.rack=", "agents.nodeLabels.rack=a\\,b", "agents.nodeLabels.rack=" + strings.Repeat("x", 64)} {
		if _, err := helm(t, "template", "cnperf", chart, "--set", bad); err == nil || !strings.Contains(err.Error(), "agents.nodeLabels") {
			t.Errorf("--set %s: want a refusal naming agents.nodeLabels, got %v", bad, err)
		}
	}
}
