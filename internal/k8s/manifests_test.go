package k8s

import (
	"io/fs"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"path"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	manifests "github.com/cnperf/cnperf/deploy/kubernetes"
	"github.com/cnperf/cnperf/internal/agent"
)

// TestManifestsDecodeStrictly decodes every document of every manifest
// file (base and overlay patches) with client-go's scheme in strict mode,
// so a misspelt or misplaced field fails here, without a cluster.
func TestManifestsDecodeStrictly(t *testing.T) {
	n := 0
	err := fs.WalkDir(manifests.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(p) == "kustomization.yaml" {
			return err
		}
		b, err := fs.ReadFile(manifests.Files, p)
		if err != nil {
			return err
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(string(stripComments([]byte(doc)))) == "" {
				continue
			}
			// Overlay patches may carry kustomize's $patch directives, which
			// are not API fields.
			clean, err := dropDirectives([]byte(doc))
			if err != nil {
				t.Errorf("%s document %d: %v", p, i, err)
				continue
			}
			if _, err := DecodeStrict(Document{File: p, YAML: clean}); err != nil {
				t.Errorf("document %d: %v", i, err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 12 {
		t.Fatalf("decoded only %d documents; the base alone has more", n)
	}
}

func dropDirectives(doc []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, val := range t {
				if strings.HasPrefix(k, "$") {
					delete(t, k)
					continue
				}
				t[k] = walk(val)
			}
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return x
	}
	return yaml.Marshal(walk(v))
}

func TestStrictDecodeRejectsTypos(t *testing.T) {
	cases := map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replica: 1\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports: 8080\n",
		"duplicate":     "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  name: y\n",
		"unknown kind":  "apiVersion: v1\nkind: Deployment\nmetadata:\n  name: x\n",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeStrict(Document{File: name, YAML: []byte(doc)}); err == nil {
				t.Fatalf("decoded without error:\n%s", doc)
			}
		})
	}
}

func TestBaseListsEveryFile(t *testing.T) {
	docs, err := BaseDocuments()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, d := range docs {
		listed[d.File] = true
	}
	files, _ := fs.Glob(manifests.Files, "base/*.yaml")
	for _, f := range files {
		if path.Base(f) != "kustomization.yaml" && !listed[f] {
			t.Errorf("%s is not listed in base/kustomization.yaml", f)
		}
	}
}

func render(t *testing.T, o DeployOptions) []runtime.Object {
	t.Helper()
	objs, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestBaseContents(t *testing.T) {
	objs := render(t, DeployOptions{})
	if ns, ok := objs[0].(*corev1.Namespace); !ok || ns.Name != Namespace {
		t.Fatalf("first object %T: want the namespace %s first", objs[0], Namespace)
	}
	downward := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
		"POD_UID": "metadata.uid", "POD_IP": "status.podIP", "NODE_NAME": "spec.nodeName", "NODE_IP": "status.hostIP"}
	var daemonsets, hostNet int
	var server *appsv1.Deployment
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.DaemonSet:
			daemonsets++
			ps := x.Spec.Template.Spec
			if ps.HostNetwork {
				hostNet++
			}
			if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
				t.Errorf("%s mounts a service account token it does not need", x.Name)
			}
			c := ps.Containers[0]
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			for name, fp := range downward {
				if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != fp {
					t.Errorf("%s: env %s must come from the Downward API field %s", x.Name, name, fp)
				}
			}
			// Identity: a projected ServiceAccount token for audience
			// cnperf, short-lived, read by --token-file; no shared secret.
			if _, ok := env["CNPERF_TOKEN"]; ok {
				t.Errorf("%s: CNPERF_TOKEN set: agents need no shared secret", x.Name)
			}
			if !strings.Contains(strings.Join(c.Args, " "), "--token-file /var/run/secrets/cnperf/token") {
				t.Errorf("%s: args %v lack --token-file /var/run/secrets/cnperf/token", x.Name, c.Args)
			}
			var proj *corev1.ServiceAccountTokenProjection
			for _, v := range ps.Volumes {
				if v.Name == AgentTokenVolume && v.Projected != nil && len(v.Projected.Sources) == 1 {
					proj = v.Projected.Sources[0].ServiceAccountToken
				}
			}
			if proj == nil || proj.Audience != "cnperf" || proj.ExpirationSeconds == nil || *proj.ExpirationSeconds > 3600 || proj.Path != "token" {
				t.Errorf("%s: want a projected serviceAccountToken (audience cnperf, at most 1 h, path token), got %+v", x.Name, proj)
			}
			if want := agentTokenVolume(); proj != nil && !reflect.DeepEqual(*want.Projected.Sources[0].ServiceAccountToken, *proj) {
				t.Errorf("%s: token volume differs from the one shaped agents get: %+v", x.Name, proj)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: needs readiness and liveness probes", x.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: needs cpu and memory requests", x.Name)
			}
			if !c.Resources.Limits.Cpu().IsZero() {
				t.Errorf("%s: a CPU limit would throttle the probes and distort throughput", x.Name)
			}
			if !strings.Contains(strings.Join(c.Args, " "), "--server") {
				t.Errorf("%s: args %v lack --server", x.Name, c.Args)
			}
		case *appsv1.Deployment:
			server = x
		case *rbacv1.Role:
			for _, r := range x.Rules {
				for _, v := range r.Verbs {
					if v == "*" {
						t.Errorf("role %s: wildcard verb", x.Name)
					}
				}
				for _, res := range r.Resources {
					if res == "*" || res == "secrets" && len(r.ResourceNames) == 0 {
						t.Errorf("role %s: too broad on %s", x.Name, res)
					}
				}
			}
		}
	}
	if daemonsets != 2 || hostNet != 0 {
		t.Errorf("daemonsets %d (host network %d): want 2 (0): host-network agents are an opt-in", daemonsets, hostNet)
	}
	if server == nil {
		t.Fatal("no server deployment")
	}
	c := server.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("server readiness probe: want GET /readyz")
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("server liveness probe: want GET /healthz")
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--agent-token-review") {
		t.Errorf("server args %v: want --agent-token-review", c.Args)
	}
	for _, e := range c.Env {
		if e.Name == "CNPERF_AGENT_TOKEN" {
			t.Errorf("server reads CNPERF_AGENT_TOKEN: no shared agent secret in the cluster")
		}
	}
	var review bool
	for _, o := range objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && b.RoleRef.Name == "system:auth-delegator" &&
			len(b.Subjects) == 1 && b.Subjects[0].Name == ServerName && b.Subjects[0].Namespace == Namespace {
			review = true
		}
	}
	if !review {
		t.Errorf("the server's account is not bound to system:auth-delegator (TokenReview)")
	}
	if server.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("server strategy %s: SQLite on a RWO volume needs Recreate", server.Spec.Strategy.Type)
	}
}

// TestAgentsReportZone: every agent DaemonSet `cnperf k8s deploy` and
// `kubectl apply -k` install (the base's pod agents and the host-network
// one) passes the node's zone and region from the pod's topology labels
// (Downward API) to the agent, for the server's pair plans by zone.
func TestAgentsReportZone(t *testing.T) {
	fieldOf := map[string]string{
		agent.EnvZone:   "metadata.labels['" + agent.LabelZone + "']",
		agent.EnvRegion: "metadata.labels['" + agent.LabelRegion + "']",
	}
	for _, o := range []DeployOptions{{}, {TLS: true, HostAgents: true, QoSAgents: true}} {
		var n, host int
		for _, obj := range render(t, o) {
			ds, ok := obj.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			n++
			if ds.Spec.Template.Spec.HostNetwork {
				host++
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e
			}
			for name, fp := range fieldOf {
				if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != fp {
					t.Errorf("%+v: %s: env %s must come from the Downward API field %s, got %+v", o, ds.Name, name, fp, e)
				}
			}
		}
		if want := map[bool]int{true: 1}[o.HostAgents]; n != 2+want || host != want {
			t.Errorf("%+v: %d DaemonSets (%d host network): want %d (%d)", o, n, host, 2+want, want)
		}
	}
}

func TestRenderOptions(t *testing.T) {
	objs := render(t, DeployOptions{Image: "localhost/cnperf:dev", ImagePullPolicy: corev1.PullNever, NodePort: 30001, PostgresSecret: "pg"})
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.PersistentVolumeClaim:
			t.Errorf("PVC %s kept although the server uses PostgreSQL", x.Name)
		case *corev1.Service:
			if x.Spec.Type != corev1.ServiceTypeNodePort || x.Spec.Ports[0].NodePort != 30001 {
				t.Errorf("service: type %s port %d, want NodePort 30001", x.Spec.Type, x.Spec.Ports[0].NodePort)
			}
		case *appsv1.Deployment:
			c := x.Spec.Template.Spec.Containers[0]
			if c.Image != "localhost/cnperf:dev" || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("server image %s %s", c.Image, c.ImagePullPolicy)
			}
			if len(x.Spec.Template.Spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
				t.Errorf("server keeps the SQLite volume with PostgreSQL")
			}
			for _, e := range c.Env {
				if e.Name == "CNPERF_DB" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "pg") {
					t.Errorf("CNPERF_DB = %+v, want from secret pg", e)
				}
			}
		case *appsv1.DaemonSet:
			if c := x.Spec.Template.Spec.Containers[0]; c.Image != "localhost/cnperf:dev" {
				t.Errorf("%s image %s", x.Name, c.Image)
			}
		}
		if _, err := ToUnstructured(o); err != nil {
			t.Error(err)
		}
	}
}

func TestDeployOptionsRejectBadInput(t *testing.T) {
	cases := map[string]DeployOptions{
		"node port out of range": {NodePort: 80},
		"pull policy":            {ImagePullPolicy: "Sometimes"},
		"secret name":            {PostgresSecret: "Bad_Name"},
		"image with space":       {Image: "a b"},
		"pull secret name":       {ImagePullSecret: "Bad_Name"},
		"credentials, no name":   {PullSecretConfig: []byte("{}")},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Render(o); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestClusterRoleBindingToNamespace: deployed into another namespace, the
// base's TokenReview binding gets that namespace's name and account.
func TestClusterRoleBindingToNamespace(t *testing.T) {
	for _, o := range render(t, DeployOptions{}) {
		b, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok {
			continue
		}
		u, err := ToUnstructured(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := toNamespace(u, "perf-team"); err != nil {
			t.Fatal(err)
		}
		subs, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		if u.GetName() != "cnperf-server-token-review-perf-team" || len(subs) != 1 || subs[0].(map[string]any)["namespace"] != "perf-team" {
			t.Errorf("moved binding: name %s subjects %v", u.GetName(), subs)
		}
	}
}
