package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
)

// kubectlPath finds a real kubectl: on PATH, or the one the Kubernetes
// harness builds (test/k8s/build.sh); else the test skips.
func kubectlPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/var/cache/cnperf-k8s/bin-*/kubectl"); len(m) > 0 {
		return m[len(m)-1]
	}
	t.Skip("no kubectl on PATH or in /var/cache/cnperf-k8s (make test-k8s builds one)")
	return ""
}

// fakeCluster is an API server that answers /version and says every
// namespace is missing, recording the paths asked for.
type fakeCluster struct {
	mu    sync.Mutex
	paths []string
	url   string
}

func newFakeCluster(t *testing.T) *fakeCluster {
	fc := &fakeCluster{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc.mu.Lock()
		fc.paths = append(fc.paths, r.URL.Path)
		fc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			_, _ = io.WriteString(w, `{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	t.Cleanup(srv.Close)
	fc.url = srv.URL
	return fc
}

func (fc *fakeCluster) asked(path string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, p := range fc.paths {
		if p == path {
			return true
		}
	}
	return false
}

// TestKubectlPlugin runs the cnperf binary as kubectl-cnperf through a real
// kubectl: help and version, and --kubeconfig, --context and -n reaching a
// fake API server.
func TestKubectlPlugin(t *testing.T) {
	kubectl := kubectlPath(t)
	bin := cnperftest.Binary(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, KubectlPluginName)); err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster(t)
	// The current context points nowhere: only --context fake reaches the
	// fake cluster.
	cfg := filepath.Join(dir, "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: dead\n" +
		"clusters:\n- name: fake\n  cluster: {server: " + fc.url + "}\n- name: dead\n  cluster: {server: 'http://127.0.0.1:1'}\n" +
		"users:\n- name: u\n  user: {token: t}\n" +
		"contexts:\n- name: fake\n  context: {cluster: fake, user: u}\n- name: dead\n  context: {cluster: dead, user: u}\n"
	if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=", "HOME="+dir)
	run := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"cnperf"}, args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("kubectl cnperf %v: still running after 60s", args)
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatalf("kubectl cnperf %v: %v", args, err)
		}
		return 0, out.String()
	}
	cases := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"help", []string{"--help"}, 0, "kubectl cnperf [command]"},
		{"run help", []string{"run", "--help"}, 0, "kubectl cnperf run SUITE"},
		{"version", []string{"version"}, 0, "commit"},
		{"missing kubeconfig", []string{"status", "--kubeconfig", filepath.Join(dir, "none")}, 1, filepath.Join(dir, "none") + " does not exist"},
		{"unknown context", []string{"--kubeconfig", cfg, "--context", "nope", "status"}, 1, `"nope"`},
		{"bad namespace", []string{"--kubeconfig", cfg, "--context", "fake", "-n", "Not_A_Name", "status"}, 1, `namespace "Not_A_Name"`},
		{"context and namespace", []string{"status", "--kubeconfig", cfg, "--context", "fake", "-n", "netperf"}, 0, "no namespace netperf"},
		{"default namespace", []string{"--kubeconfig=" + cfg, "--context=fake", "status"}, 0, "no namespace cnperf"},
		{"kubectl's flag not served", []string{"--user", "x", "status"}, 1, "unknown flag: --user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := run(c.args...)
			if code != c.code || !strings.Contains(out, c.contains) {
				t.Fatalf("kubectl cnperf %v: exit %d, want %d with %q; output:\n%s", c.args, code, c.code, c.contains, out)
			}
		})
	}
	if !fc.asked("/api/v1/namespaces/netperf") || !fc.asked("/api/v1/namespaces/cnperf") {
		t.Errorf("the fake cluster was not asked for the namespaces: %v", fc.paths)
	}
}

func TestIsKubectlPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-cnperf": true, "/usr/local/bin/kubectl-cnperf": true, `kubectl-cnperf.exe`: true,
		"cnperf": false, "/bin/kubectl": false, "kubectl-cnperf-k8s": false,
	} {
		if got := IsKubectlPlugin(argv0); got != want {
			t.Errorf("IsKubectlPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}
