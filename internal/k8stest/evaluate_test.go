package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
)

// runEvaluate runs `cnperf evaluate --k8s --out FILE` with a short budget
// as a user of a default deploy would and checks the sheet's structure:
// every question has a line with a verdict word and a reason (why it was
// not asked, where it was not), at least one was asked, the bundle's
// environment names the CNI with its release and mode, and the server's
// store held on its read-only root file system. It returns the bundle's
// path, for compare.
func runEvaluate(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, cniDir string, want CNIFacts) string {
	out := filepath.Join(os.TempDir(), "cnperf-k8s-evaluate-"+strings.ReplaceAll(want.String(), " ", "-")+".json")
	// A bundle of an earlier run must not stand in for this one's.
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	t0 := time.Now()
	stdout, errOut, err := cnp(12*time.Minute, "evaluate", "--k8s", "--budget", "3m", "--time", "2s", "--repeat", "1",
		"--cni-conf-dir", cniDir, "--out", out, "--json")
	if err != nil {
		t.Fatalf("cnperf evaluate --k8s: %v\n%s\n%s", err, stdout, errOut)
	}
	var res struct {
		Schema string `json:"schema"`
		Sheet  struct {
			Lines []struct {
				Question, Scope, Verdict, Figures, Reason string
			} `json:"lines"`
		} `json:"sheet"`
		Environment struct {
			CNI        string   `json:"cni"`
			CNIVersion string   `json:"cni_version"`
			Backend    string   `json:"backend"`
			Notes      []string `json:"notes"`
		} `json:"environment"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if res.Schema != "cnperf.bundle/v1" {
		t.Errorf("schema %q", res.Schema)
	}
	words := map[string]bool{"holds": true, "fails": true, "partial": true, "measured": true, "unknown": true, "not asked": true}
	by := map[string]int{}
	asked := 0
	for _, l := range res.Sheet.Lines {
		by[l.Question]++
		t.Logf("%-9s %-40s %-9s %s | %s", l.Question, l.Scope, l.Verdict, l.Figures, l.Reason)
		if !words[l.Verdict] || l.Reason == "" {
			t.Errorf("line without a verdict word or reason: %+v", l)
		}
		if l.Verdict != "not asked" {
			asked++
		}
	}
	for _, q := range []string{"overlay", "capacity", "dscp", "priority", "bandwidth", "ingress", "fairness", "mtu", "ipv6", "slo"} {
		if by[q] == 0 {
			t.Errorf("question %s has no line", q)
		}
	}
	if asked == 0 {
		t.Errorf("no question asked within the budget")
	}
	// The environment names the CNI, its release and its mode as a real
	// cluster shows them (the harness's own bridge has no release).
	env := res.Environment
	if env.CNI == "" || env.CNI != want.Name || env.Backend != want.Backend {
		t.Errorf("bundle environment CNI %q mode %q, want %s %s", env.CNI, env.Backend, want.Name, want.Backend)
	}
	if want.Version != "" && env.CNIVersion != want.Version {
		t.Errorf("bundle environment CNI version %q, want %s (notes: %q)", env.CNIVersion, want.Version, env.Notes)
	}
	for _, l := range res.Sheet.Lines {
		if strings.Contains(l.Reason, "disk I/O error") {
			t.Errorf("the server's store failed: %s %s: %s", l.Question, l.Scope, l.Reason)
		}
	}
	serverStoreHeld(ctx, t, kc, t0)
	t.Logf("evaluate on %s in %v: environment CNI %q version %q backend %q, notes %q; bundle %s", want, time.Since(t0).Round(time.Second),
		env.CNI, env.CNIVersion, env.Backend, env.Notes, out)
	return out
}

// serverStoreHeld checks that the server runs on a read-only root file
// system and logged no SQLite I/O error since t0: a statement journal
// that spilled to a temporary file found no writable directory there
// (SQLITE_IOERR_GETTEMPPATH) until the store kept such files in memory.
func serverStoreHeld(ctx context.Context, t *testing.T, kc *k8s.Client, since time.Time) {
	t.Helper()
	dep, err := kc.Kube.AppsV1().Deployments(kc.NS()).Get(ctx, k8s.ServerName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the server's Deployment: %v", err)
		return
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("server container %s: root file system not read-only", c.Name)
		}
	}
	sel := metav1.FormatLabelSelector(dep.Spec.Selector)
	pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(pods.Items) == 0 {
		t.Errorf("the server's pods (%s): %v, %d", sel, err, len(pods.Items))
		return
	}
	st := metav1.NewTime(since)
	lines := 0
	for _, p := range pods.Items {
		b, err := kc.Kube.CoreV1().Pods(kc.NS()).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(ctx)
		if err != nil {
			t.Errorf("server pod %s's log: %v", p.Name, err)
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l == "" {
				continue
			}
			lines++
			if strings.Contains(l, "disk I/O error") || strings.Contains(l, "SQLITE_IOERR") {
				t.Errorf("server pod %s: %s", p.Name, l)
			}
		}
	}
	t.Logf("server on a read-only root file system: %d log lines of %d pod(s) during evaluate, no SQLite I/O error among them", lines, len(pods.Items))
}

// compareBundles runs `cnperf compare` of the bundles (no server) and logs
// its table.
func compareBundles(t *testing.T, cnp cnpFunc, files []string) {
	stdout, errOut, err := cnp(time.Minute, append([]string{"compare"}, files...)...)
	if err != nil {
		t.Errorf("cnperf compare of %d bundles: %v\n%s", len(files), err, errOut)
		return
	}
	t.Logf("cnperf compare of the evaluate bundles:\n%s", stdout)
}
