// Package helm holds the tests of the Helm chart in deploy/helm/cnperf:
// helm lint, and helm template compared object by object with the
// kustomize base and its overlays (as internal/k8s renders them), so the
// two cannot drift apart.
package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cnperf/cnperf/internal/k8s"
)

const chart = "cnperf"

// helmBin finds helm: $CNPERF_HELM, PATH, or the cache test/helm/build.sh
// fills (make test runs it); else the test skips.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CNPERF_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	for _, dir := range []string{"/var/cache/cnperf-tools", filepath.Join(os.Getenv("HOME"), ".cache", "cnperf-tools")} {
		if m, _ := filepath.Glob(filepath.Join(dir, "helm-v3.*", "helm")); len(m) > 0 {
			return m[len(m)-1]
		}
	}
	t.Skip("helm not found: run test/helm/build.sh (make test does) or set CNPERF_HELM")
	return ""
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return out.String(), errors.New(strings.TrimSpace(errb.String()) + ": " + err.Error())
	}
	return out.String(), nil
}

// render runs helm template with the given --set values into namespace
// cnperf and returns the objects by "Kind/name".
func render(t *testing.T, sets ...string) map[string]runtime.Object {
	t.Helper()
	args := []string{"template", "cnperf", chart, "--namespace", "cnperf"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	objs := map[string]runtime.Object{}
	rd := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, err := k8s.DecodeStrict(k8s.Document{File: "helm template", YAML: doc})
		if err != nil {
			t.Fatalf("rendered document does not decode strictly: %v\n%s", err, doc)
		}
		objs[key(t, obj)] = obj
	}
	return objs
}

func key(t *testing.T, obj runtime.Object) string {
	u, err := k8s.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u.GetKind() + "/" + u.GetName()
}

// comparable is obj without what Helm adds to top-level metadata.
func comparable(t *testing.T, obj runtime.Object) map[string]any {
	u, err := k8s.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	labels := u.GetLabels()
	for _, k := range []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"} {
		delete(labels, k)
	}
	u.SetLabels(labels)
	unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
	return u.Object
}

func TestChartLint(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		{"server.postgres.enabled=true", "server.service.type=NodePort"},
		{"runner.serviceAccount.create=true", "agents.perNode=1", "namespace.create=true", "tls.enabled=false"},
		{"hostAgents=true", "qosAgents=true", "tls.existingSecret=my-tls"},
	} {
		args := []string{"lint", "--strict", chart, "--namespace", "cnperf"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", sets, err, out)
		}
	}
}

// TestChartMatchesKustomize renders the chart with values equal to the base
// and to each overlay, and requires the same objects (kinds, names and
// contents, Helm's labels aside) as internal/k8s renders from the base with
// the overlays' options; the chart adds only the token Secret.
func TestChartMatchesKustomize(t *testing.T) {
	cases := []struct {
		name string
		sets []string
		opts k8s.DeployOptions
	}{
		{"default: base with TLS", nil, k8s.DeployOptions{TLS: true}},
		{"plain http", []string{"tls.enabled=false"}, k8s.DeployOptions{}},
		{"nodeport overlay", []string{"server.service.type=NodePort", "server.service.nodePort=30001"}, k8s.DeployOptions{NodePort: 30001, TLS: true}},
		{"postgres overlay", []string{"server.postgres.enabled=true", "tls.enabled=false"}, k8s.DeployOptions{PostgresSecret: "cnperf-postgres"}},
		{"image", []string{"image.repository=localhost/cnperf", "image.tag=dev", "image.pullPolicy=Never"},
			k8s.DeployOptions{Image: "localhost/cnperf:dev", ImagePullPolicy: corev1.PullNever, TLS: true}},
		{"image by digest, pull secret", []string{"image.repository=registry.example.com/cnperf", "image.tag=sha256:" + strings.Repeat("ab", 32), "image.pullSecrets[0]=regcred"},
			k8s.DeployOptions{Image: "registry.example.com/cnperf@sha256:" + strings.Repeat("ab", 32), ImagePullSecret: "regcred", TLS: true}},
		{"tls with postgres", []string{"server.postgres.enabled=true"}, k8s.DeployOptions{TLS: true, PostgresSecret: "cnperf-postgres"}},
		{"host agents", []string{"hostAgents=true"}, k8s.DeployOptions{TLS: true, HostAgents: true}},
		{"qos agents", []string{"qosAgents=true", "tls.enabled=false"}, k8s.DeployOptions{QoSAgents: true}},
		{"both opt-ins", []string{"hostAgents=true", "qosAgents=true"}, k8s.DeployOptions{TLS: true, HostAgents: true, QoSAgents: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := render(t, append([]string{"namespace.create=true"}, c.sets...)...)
			if _, ok := got["Secret/cnperf-tokens"]; !ok {
				t.Errorf("the chart made no Secret cnperf-tokens")
			}
			delete(got, "Secret/cnperf-tokens")
			// The TLS material the chart makes where `cnperf k8s deploy`
			// makes it at apply time (TestChartTLS checks it).
			made := c.opts.TLS
			for _, k := range []string{"Secret/cnperf-ca", "ConfigMap/cnperf-ca-bundle", "Secret/cnperf-server-tls"} {
				if _, ok := got[k]; ok != made {
					t.Errorf("%s rendered %v, want %v", k, ok, made)
				}
				delete(got, k)
			}
			objs, err := k8s.Render(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]runtime.Object{}
			for _, o := range objs {
				want[key(t, o)] = o
			}
			if g, w := keys(got), keys(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("chart renders %v\nkustomize has %v", g, w)
			}
			for k, w := range want {
				gj, _ := json.MarshalIndent(comparable(t, got[k]), "", " ")
				wj, _ := json.MarshalIndent(comparable(t, w), "", " ")
				if !bytes.Equal(gj, wj) {
					t.Errorf("%s differs from the kustomize base:\nchart:\n%s\nkustomize:\n%s", k, gj, wj)
				}
			}
		})
	}
}

func keys(m map[string]runtime.Object) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestChartValues checks the values the overlays do not cover.
func TestChartValues(t *testing.T) {
	objs := render(t, "agents.perNode=1", "runner.serviceAccount.create=true",
		"auth.userToken=u-secret")
	var ds []string
	for k := range objs {
		if strings.HasPrefix(k, "DaemonSet/") {
			ds = append(ds, k)
		}
	}
	if len(ds) != 1 || ds[0] != "DaemonSet/cnperf-agent" {
		t.Errorf("one agent per node, no host agents: got DaemonSets %v", ds)
	}
	if _, ok := objs["Namespace/cnperf"]; ok {
		t.Errorf("namespace.create defaults to false, but a Namespace was rendered")
	}
	rb, ok := objs["RoleBinding/cnperf-runner"].(*rbacv1.RoleBinding)
	if !ok || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != "cnperf-runner" {
		t.Errorf("runner ServiceAccount not bound to cnperf-runner: %+v", objs["RoleBinding/cnperf-runner"])
	}
	if _, ok := objs["ClusterRoleBinding/cnperf-cluster-reader-cnperf"]; !ok {
		t.Errorf("runner ServiceAccount not bound to cnperf-cluster-reader")
	}
	sec, ok := objs["Secret/cnperf-tokens"].(*corev1.Secret)
	if !ok || string(sec.Data["user-token"]) != "u-secret" || len(sec.Data) != 1 {
		t.Errorf("the Secret should hold the user token from values and nothing else (no shared agent secret): %+v", objs["Secret/cnperf-tokens"])
	}
	random := render(t)["Secret/cnperf-tokens"].(*corev1.Secret)
	if n := len(random.Data["user-token"]); n != 48 {
		t.Errorf("random user token: %d characters, want 48", n)
	}
	if _, ok := objs["ClusterRoleBinding/cnperf-server-token-review-cnperf"]; !ok {
		t.Errorf("the server's account is not allowed TokenReview")
	}
	existing := render(t, "auth.existingSecret=my-tokens")
	if _, ok := existing["Secret/cnperf-tokens"]; ok {
		t.Errorf("with auth.existingSecret the chart still makes cnperf-tokens")
	}
	if b, _ := json.Marshal(existing["Deployment/cnperf-server"]); !bytes.Contains(b, []byte(`"name":"my-tokens"`)) {
		t.Errorf("the server does not read auth.existingSecret")
	}
	if _, err := helm(t, "template", "cnperf", chart, "--set", "agents.perNode=9"); err == nil || !strings.Contains(err.Error(), "agents.perNode 9") {
		t.Errorf("agents.perNode=9: want a refusal naming it, got %v", err)
	}
	if _, err := helm(t, "template", "cnperf", chart, "--set", "agents.hostNetwork.enabled=true"); err == nil || !strings.Contains(err.Error(), "hostAgents") {
		t.Errorf("agents.hostNetwork.enabled (replaced): want a refusal naming hostAgents, got %v", err)
	}
	notes, err := helm(t, "install", "cnperf", chart, "--namespace", "cnperf", "--dry-run=client", "--disable-openapi-validation", "--kubeconfig", fakeAPIServer(t))
	if err != nil || !strings.Contains(notes, "kubectl cnperf run baseline") {
		t.Errorf("NOTES.txt should tell the next command: %v\n%s", err, notes)
	}
}

// fakeAPIServer answers the discovery requests `helm install --dry-run`
// makes (version, API groups) and returns a kubeconfig pointing at it: no
// cluster needed to render NOTES.txt.
func fakeAPIServer(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
	})
	resources := func(gv string, rs ...string) string {
		var list []string
		for _, r := range rs {
			kind, namespaced, _ := strings.Cut(r, ":")
			plural := strings.ToLower(kind) + "s"
			if strings.HasSuffix(kind, "ss") {
				plural = strings.ToLower(kind) + "es"
			}
			if strings.HasSuffix(kind, "y") {
				plural = strings.ToLower(strings.TrimSuffix(kind, "y")) + "ies"
			}
			list = append(list, `{"name":"`+plural+`","singularName":"","namespaced":`+namespaced+`,"kind":"`+kind+`","verbs":["get","list","create"]}`)
		}
		return `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"` + gv + `","resources":[` + strings.Join(list, ",") + `]}`
	}
	answers := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`,
		"/api/v1": resources("v1", "Namespace:false", "ServiceAccount:true", "Secret:true", "Service:true", "PersistentVolumeClaim:true", "ConfigMap:true"),
		"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[` +
			`{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}},` +
			`{"name":"rbac.authorization.k8s.io","versions":[{"groupVersion":"rbac.authorization.k8s.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"rbac.authorization.k8s.io/v1","version":"v1"}}]}`,
		"/apis/apps/v1":                      resources("apps/v1", "Deployment:true", "DaemonSet:true"),
		"/apis/rbac.authorization.k8s.io/v1": resources("rbac.authorization.k8s.io/v1", "Role:true", "RoleBinding:true", "ClusterRole:false", "ClusterRoleBinding:false"),
	}
	for path, body := range answers {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"kind":"Status","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: fake, cluster: {server: " + srv.URL + "}}]\n" +
		"users: [{name: fake, user: {token: fake}}]\ncontexts: [{name: fake, context: {cluster: fake, user: fake}}]\ncurrent-context: fake\n"
	if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// renderDocs runs helm template with sets and returns every rendered
// document as plain data (the Prometheus Operator's kinds are not in the
// strict decoder's scheme).
func renderDocs(t *testing.T, sets ...string) []map[string]any {
	t.Helper()
	args := []string{"template", "cnperf", chart, "--namespace", "cnperf"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	var docs []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// TestChartPrometheus: the Service carries scrape annotations; a
// ServiceMonitor or a PodMonitor, off by default, scrapes /metrics on
// port http over the chart's TLS; both at once are refused.
func TestChartPrometheus(t *testing.T) {
	find := func(docs []map[string]any, kind string) map[string]any {
		for _, d := range docs {
			if d["kind"] == kind {
				return d
			}
		}
		return nil
	}
	def := renderDocs(t)
	for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
		if find(def, kind) != nil {
			t.Errorf("a %s by default: it needs the operator's CRDs, so it must be opt-in", kind)
		}
	}
	svc := find(def, "Service")
	ann, _, _ := unstructured.NestedStringMap(svc, "metadata", "annotations")
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "8080" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/scheme"] != "https" {
		t.Errorf("Service scrape annotations %v, want scrape true, port 8080, path /metrics, scheme https (TLS by default)", ann)
	}
	for _, c := range []struct {
		kind, set, endpoints, scheme string
		tls                          bool
	}{
		{"ServiceMonitor", "metrics.serviceMonitor.enabled=true", "endpoints", "https", true},
		{"PodMonitor", "metrics.podMonitor.enabled=true", "podMetricsEndpoints", "http", false},
	} {
		docs := renderDocs(t, c.set, "metrics."+map[string]string{"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor"}[c.kind]+".labels.release=kps", "tls.enabled="+fmt.Sprint(c.tls))
		mon := find(docs, c.kind)
		if mon == nil {
			t.Fatalf("--set %s rendered no %s", c.set, c.kind)
		}
		if mon["apiVersion"] != "monitoring.coreos.com/v1" {
			t.Errorf("%s apiVersion %v", c.kind, mon["apiVersion"])
		}
		if l, _, _ := unstructured.NestedString(mon, "metadata", "labels", "release"); l != "kps" {
			t.Errorf("%s lacks the extra label release=kps", c.kind)
		}
		if sel, _, _ := unstructured.NestedString(mon, "spec", "selector", "matchLabels", "app.kubernetes.io/name"); sel != "cnperf-server" {
			t.Errorf("%s selects %q, want the server", c.kind, sel)
		}
		eps, _, _ := unstructured.NestedSlice(mon, "spec", c.endpoints)
		if len(eps) != 1 {
			t.Fatalf("%s: %d %s, want 1", c.kind, len(eps), c.endpoints)
		}
		ep := eps[0].(map[string]any)
		if ep["port"] != "http" || ep["path"] != "/metrics" || ep["scheme"] != c.scheme {
			t.Errorf("%s endpoint %v, want port http, path /metrics, scheme %s", c.kind, ep, c.scheme)
		}
		ca, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "configMap", "name")
		if c.tls && ca != "cnperf-ca-bundle" {
			t.Errorf("%s over TLS trusts %q, want the chart's CA ConfigMap", c.kind, ca)
		}
	}
	if _, err := helm(t, "template", "cnperf", chart, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true"); err == nil || !strings.Contains(err.Error(), "enable one") {
		t.Errorf("both monitors: want a refusal, got %v", err)
	}
}
