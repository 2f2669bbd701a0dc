package k8stest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runEvaluate runs `cnperf evaluate --k8s --out FILE` with a short budget
// as a user of a default deploy would and checks the sheet's structure:
// every question has a line with a verdict word and a reason (why it was
// not asked, where it was not), at least one was asked, and the bundle's
// environment names the CNI. It returns the bundle's path, for compare.
func runEvaluate(t *testing.T, cnp cnpFunc, cniDir string, want CNIFacts) string {
	out := filepath.Join(os.TempDir(), "cnperf-k8s-evaluate-"+strings.ReplaceAll(want.String(), " ", "-")+".json")
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
			CNI        string `json:"cni"`
			CNIVersion string `json:"cni_version"`
			Backend    string `json:"backend"`
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
	if res.Environment.CNI != want.Name {
		t.Errorf("bundle environment CNI %q, want %s", res.Environment.CNI, want.Name)
	}
	t.Logf("evaluate on %s in %v: environment CNI %q version %q backend %q; bundle %s", want, time.Since(t0).Round(time.Second),
		res.Environment.CNI, res.Environment.CNIVersion, res.Environment.Backend, out)
	return out
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
