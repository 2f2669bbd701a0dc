package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDashboardProxy: the dashboard's local address forwards each request
// (path, query, method, body) to the server over the verified TLS
// connection, and drops the session cookie's Secure flag, which a browser
// on http://127.0.0.1 would otherwise refuse to send back.
func TestDashboardProxy(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		http.SetCookie(w, &http.Cookie{Name: "cnperf_session", Value: "s1", Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b))
	}))
	defer srv.Close()
	target, _ := url.Parse(srv.URL)
	local := httptest.NewServer(dashboardProxy(target, srv.Client().Transport))
	defer local.Close()

	resp, err := http.Post(local.URL+"/login?next=%2Fruns", "application/x-www-form-urlencoded", strings.NewReader("token=x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(body), "POST /login?next=%2Fruns token=x"; got != want {
		t.Errorf("the server saw %q, want %q", got, want)
	}
	sc := resp.Header.Get("Set-Cookie")
	if !strings.Contains(sc, "cnperf_session=s1") || !strings.Contains(sc, "HttpOnly") || strings.Contains(strings.ToLower(sc), "secure") {
		t.Errorf("Set-Cookie %q: want the session cookie, HttpOnly, without Secure", sc)
	}
}

// TestKubectlReportCompareDashboard: kubectl cnperf has report, compare
// and dashboard, and they go to the cluster (a port-forward to the server
// pod), not to --server, which they do not offer.
func TestKubectlReportCompareDashboard(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	fc := newFakeCluster(t)
	cfg := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: fake\n" +
		"clusters:\n- name: fake\n  cluster: {server: " + fc.url + "}\n" +
		"users:\n- name: u\n  user: {token: t}\n" +
		"contexts:\n- name: fake\n  context: {cluster: fake, user: u}\n"
	if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errb strings.Builder
		err := RunKubectl(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
		return out.String() + errb.String(), err
	}
	help, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"report", "compare", "dashboard"} {
		if !strings.Contains(help, "\n  "+verb+" ") {
			t.Errorf("kubectl cnperf --help lacks %s:\n%s", verb, help)
		}
		h, err := run(verb, "--help")
		if err != nil || strings.Contains(h, "--server") || !strings.Contains(h, "--namespace") {
			t.Errorf("kubectl cnperf %s --help: %v; want --namespace and no --server:\n%s", verb, err, h)
		}
	}
	for _, args := range [][]string{
		{"report", "run-1", "-n", "perf", "--kubeconfig", cfg},
		{"compare", "run-1", "run-2", "-n", "perf", "--kubeconfig", cfg},
		{"dashboard", "-n", "perf", "--kubeconfig", cfg, "--port", "0"},
	} {
		_, err := run(args...)
		if err == nil || strings.Contains(err.Error(), "--server") {
			t.Errorf("kubectl cnperf %v: %v, want the cluster's answer (no server pod)", args, err)
		}
	}
	if !fc.asked("/api/v1/namespaces/perf/pods") {
		t.Errorf("the verbs did not look for the server pod in namespace perf: %v", fc.paths)
	}
	if _, err := run("dashboard", "--port", "70000", "--kubeconfig", cfg); err == nil || !strings.Contains(err.Error(), "--port 70000") {
		t.Errorf("dashboard --port 70000: %v, want a refusal", err)
	}
}
