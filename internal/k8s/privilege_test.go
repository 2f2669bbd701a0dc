package k8s

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cnperf/cnperf/internal/k8s/psatest"
)

// TestDefaultInstallIsRestricted: what `cnperf k8s deploy` applies by
// default (and the kustomize base it renders) passes Pod Security
// restricted as the API server's admission checks it, in a namespace
// labelled restricted, with no host network, no added capability, no
// image tagged latest; each opt-in adds exactly its agent set and labels
// the namespace privileged (and the admission's checks then refuse the
// pods under restricted, so the check is not one that cannot fail).
func TestDefaultInstallIsRestricted(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       DeployOptions
		level      string
		daemonsets []string
		hostNet    bool
		caps       []corev1.Capability // added to the pod agents
	}{
		{"default", DeployOptions{}, LevelRestricted, []string{"cnperf-agent", "cnperf-agent-b"}, false, nil},
		{"tls", DeployOptions{TLS: true}, LevelRestricted, []string{"cnperf-agent", "cnperf-agent-b"}, false, nil},
		{"postgres", DeployOptions{PostgresSecret: "pg"}, LevelRestricted, []string{"cnperf-agent", "cnperf-agent-b"}, false, nil},
		{"host agents", DeployOptions{HostAgents: true}, LevelPrivileged, []string{"cnperf-agent", "cnperf-agent-b", "cnperf-agent-host"}, true, nil},
		{"qos agents", DeployOptions{QoSAgents: true}, LevelPrivileged, []string{"cnperf-agent", "cnperf-agent-b"}, false, QoSCaps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.opts)
			ns := objs[0].(*corev1.Namespace)
			if ns.Labels[podSecurityEnforce] != tc.level || ns.Labels[podSecurityWarn] != tc.level {
				t.Errorf("namespace labels %v, want enforce and warn %s", ns.Labels, tc.level)
			}
			bad, err := psatest.Violations(LevelRestricted, objs)
			if err != nil {
				t.Fatal(err)
			}
			if restricted := tc.level == LevelRestricted; restricted != (len(bad) == 0) {
				t.Errorf("Pod Security restricted: %d violations, want none exactly when the level is restricted:\n%s", len(bad), strings.Join(bad, "\n"))
			}
			var ds []string
			for _, o := range objs {
				checkImage(t, o)
				d, ok := o.(*appsv1.DaemonSet)
				if !ok {
					continue
				}
				ds = append(ds, d.Name)
				ps := d.Spec.Template.Spec
				if ps.HostNetwork != (d.Name == "cnperf-agent-host") {
					t.Errorf("%s: hostNetwork %v", d.Name, ps.HostNetwork)
				}
				if ps.HostNetwork {
					continue
				}
				if got := ps.Containers[0].SecurityContext.Capabilities.Add; !slices.Equal(got, tc.caps) {
					t.Errorf("%s adds capabilities %v, want %v", d.Name, got, tc.caps)
				}
				if sys := ps.SecurityContext.Sysctls; len(sys) != 1 || sys[0].Name != "net.ipv4.ping_group_range" {
					t.Errorf("%s: sysctls %v, want net.ipv4.ping_group_range (ping without NET_RAW)", d.Name, sys)
				}
			}
			slices.Sort(ds)
			if !slices.Equal(ds, tc.daemonsets) {
				t.Errorf("DaemonSets %v, want %v", ds, tc.daemonsets)
			}
		})
	}
}

// checkImage fails t for a pod template whose image is tagged latest or
// untagged (which pulls latest).
func checkImage(t *testing.T, o runtime.Object) {
	t.Helper()
	var cs []corev1.Container
	switch x := o.(type) {
	case *appsv1.Deployment:
		cs = x.Spec.Template.Spec.Containers
	case *appsv1.DaemonSet:
		cs = x.Spec.Template.Spec.Containers
	}
	for _, c := range cs {
		name := c.Image[strings.LastIndex(c.Image, "/")+1:]
		if !strings.Contains(name, ":") || strings.HasSuffix(name, ":latest") {
			t.Errorf("container %s: image %q is latest", c.Name, c.Image)
		}
	}
}

// TestAgentSets: the opt-in agent sets read back from the deployed
// DaemonSets are the ones deployed.
func TestAgentSets(t *testing.T) {
	for _, want := range []AgentSets{{}, {Host: true}, {QoS: true}, {Host: true, QoS: true}} {
		var objs []runtime.Object
		for _, o := range render(t, DeployOptions{HostAgents: want.Host, QoSAgents: want.QoS}) {
			if _, ok := o.(*appsv1.DaemonSet); ok {
				objs = append(objs, o)
			}
		}
		got, err := fakeClient(objs...).AgentSets(context.Background())
		if err != nil || got != want {
			t.Errorf("deployed %+v, read back %+v (%v)", want, got, err)
		}
	}
}

// TestRedeployWithoutHostAgentsRemovesThem: a deploy without the opt-in
// removes the host-network agents an earlier deploy with it made (the
// namespace goes back to restricted, under which they could not run), and
// says so; with nothing to remove it says nothing.
func TestRedeployWithoutHostAgentsRemovesThem(t *testing.T) {
	var host runtime.Object
	for _, o := range render(t, DeployOptions{HostAgents: true}) {
		if d, ok := o.(*appsv1.DaemonSet); ok && d.Name == HostAgentsName {
			host = d
		}
	}
	c := fakeClient(host)
	var log strings.Builder
	if err := c.removeHostAgents(context.Background(), &log); err != nil {
		t.Fatal(err)
	}
	if s, err := c.AgentSets(context.Background()); err != nil || s.Host {
		t.Errorf("after the re-deploy the host agents are still there: %+v %v", s, err)
	}
	if !strings.Contains(log.String(), "daemonset/cnperf-agent-host deleted") {
		t.Errorf("log %q does not say the host agents went", log.String())
	}
	log.Reset()
	if err := c.removeHostAgents(context.Background(), &log); err != nil || log.Len() != 0 {
		t.Errorf("nothing to remove: err %v, log %q", err, log.String())
	}
}
