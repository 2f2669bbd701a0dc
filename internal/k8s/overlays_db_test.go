package k8s

import (
	"io/fs"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	manifests "github.com/cnperf/cnperf/deploy/kubernetes"
)

// overlayObjects decodes every object of an overlay's own files (its
// resources and patches; kustomize's $patch directives dropped) by kind.
func overlayObjects(t *testing.T, dir string) (k struct {
	Resources []string `json:"resources"`
	Patches   []struct {
		Path string `json:"path"`
	} `json:"patches"`
}, objs []runtime.Object) {
	t.Helper()
	raw, err := fs.ReadFile(manifests.Files, path.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	files := slices.Clone(k.Resources)
	for _, p := range k.Patches {
		if p.Path != "" {
			files = append(files, p.Path)
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "../") {
			continue
		}
		b, err := fs.ReadFile(manifests.Files, path.Join(dir, f))
		if err != nil {
			t.Fatalf("%s lists %s: %v", dir, f, err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(string(stripComments([]byte(doc)))) == "" {
				continue
			}
			clean, err := dropDirectives([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			obj, err := DecodeStrict(Document{File: path.Join(dir, f), YAML: clean})
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, obj)
		}
	}
	return k, objs
}

func serverEnvSecret(t *testing.T, d *appsv1.Deployment) (secret, key string) {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "CNPERF_DB" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
			}
		}
	}
	t.Fatalf("the server patch does not take CNPERF_DB from a Secret")
	return "", ""
}

// TestPostgresOverlayRunsReplicas: overlays/postgres runs two server
// replicas, rolled with none unavailable, spread over nodes, under a
// PodDisruptionBudget that selects exactly the base's server pods and
// keeps one, with the DSN from Secret cnperf-postgres.
func TestPostgresOverlayRunsReplicas(t *testing.T) {
	k, objs := overlayObjects(t, "overlays/postgres")
	if !slices.Contains(k.Resources, "server-pdb.yaml") {
		t.Errorf("kustomization resources %v: the PodDisruptionBudget is not applied", k.Resources)
	}
	base, err := Render(DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podLabels labels.Set
	for _, o := range base {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == ServerName {
			podLabels = d.Spec.Template.Labels
		}
	}
	var dep *appsv1.Deployment
	var pdb *policyv1.PodDisruptionBudget
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.Deployment:
			dep = x
		case *policyv1.PodDisruptionBudget:
			pdb = x
		}
	}
	if dep == nil || pdb == nil {
		t.Fatalf("overlay lacks the server patch (%v) or the PodDisruptionBudget (%v)", dep != nil, pdb != nil)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("server replicas %v, want 2 or more", ptrString(dep.Spec.Replicas))
	}
	if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || dep.Spec.Strategy.RollingUpdate == nil ||
		dep.Spec.Strategy.RollingUpdate.MaxUnavailable == nil || dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy %+v: want RollingUpdate with maxUnavailable 0 (the base's Recreate would stop both)", dep.Spec.Strategy)
	}
	if len(dep.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Error("replicas are not spread over nodes")
	}
	if s, key := serverEnvSecret(t, dep); s != "cnperf-postgres" || key != "dsn" {
		t.Errorf("DSN from secret %s key %s, want cnperf-postgres dsn", s, key)
	}
	if pdb.Namespace != Namespace || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %s/%s minAvailable %v: want namespace %s, minAvailable 1", pdb.Namespace, pdb.Name, pdb.Spec.MinAvailable, Namespace)
	}
	if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchLabels) == 0 ||
		!labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the server pods (labels %v)", pdb.Spec.Selector, podLabels)
	}
}

// TestMySQLOverlayReachesAnExternalDatabase: overlays/mysql is the seed's
// set-up: a Service "mysql" without a selector and Endpoints of the same
// name and namespace with an IP address and the Service's port (name and
// number), and the server takes its DSN from Secret cnperf-mysql while
// keeping one replica (MySQL carries no wake-ups between replicas).
func TestMySQLOverlayReachesAnExternalDatabase(t *testing.T) {
	k, objs := overlayObjects(t, "overlays/mysql")
	for _, f := range []string{"../../base", "mysql-service.yaml", "mysql-endpoints.yaml"} {
		if !slices.Contains(k.Resources, f) {
			t.Errorf("kustomization resources %v lack %s", k.Resources, f)
		}
	}
	var svc *corev1.Service
	var ep *corev1.Endpoints
	var dep *appsv1.Deployment
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Service:
			svc = x
		case *corev1.Endpoints:
			ep = x
		case *appsv1.Deployment:
			dep = x
		}
	}
	if svc == nil || ep == nil || dep == nil {
		t.Fatalf("overlay lacks the Service (%v), the Endpoints (%v) or the server patch (%v)", svc != nil, ep != nil, dep != nil)
	}
	if svc.Name != "mysql" || ep.Name != svc.Name || svc.Namespace != Namespace || ep.Namespace != Namespace {
		t.Errorf("Service %s/%s and Endpoints %s/%s: want both mysql in %s", svc.Namespace, svc.Name, ep.Namespace, ep.Name, Namespace)
	}
	if len(svc.Spec.Selector) != 0 {
		t.Errorf("Service selector %v: an external database's Service has none (its Endpoints are set by hand)", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 3306 {
		t.Fatalf("Service ports %+v, want one, 3306", svc.Spec.Ports)
	}
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) == 0 || len(ep.Subsets[0].Ports) != 1 {
		t.Fatalf("Endpoints subsets %+v: want one with an address and a port", ep.Subsets)
	}
	for _, a := range ep.Subsets[0].Addresses {
		if net.ParseIP(a.IP) == nil {
			t.Errorf("Endpoints address %q is not an IP address", a.IP)
		}
	}
	if p := ep.Subsets[0].Ports[0]; p.Name != svc.Spec.Ports[0].Name || p.Port != svc.Spec.Ports[0].TargetPort.IntVal {
		t.Errorf("Endpoints port %s/%d does not match the Service's %s/%v", p.Name, p.Port, svc.Spec.Ports[0].Name, svc.Spec.Ports[0].TargetPort)
	}
	if s, key := serverEnvSecret(t, dep); s != "cnperf-mysql" || key != "dsn" {
		t.Errorf("DSN from secret %s key %s, want cnperf-mysql dsn", s, key)
	}
	if dep.Spec.Replicas != nil && *dep.Spec.Replicas != 1 {
		t.Errorf("server replicas %d on MySQL, want the base's 1", *dep.Spec.Replicas)
	}
}

func ptrString(p *int32) string {
	if p == nil {
		return "unset (1)"
	}
	return strconv.Itoa(int(*p))
}
