// Package prometheus holds the tests of cnperf's Prometheus alert rules
// (cnperf-alerts.yaml): promtool checks them and runs their unit tests,
// and every metric they name must be one cnperf's /metrics exports.
package prometheus

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/cnperf/cnperf/internal/metrics"
)

// promtoolBin finds promtool: $CNPERF_PROMTOOL, PATH, or the cache
// scripts/install-test-deps.sh fills (make test runs it); else the test
// skips.
func promtoolBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CNPERF_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if p := "/var/cache/cnperf-tools/promtool/promtool"; fileExists(p) {
		return p
	}
	t.Skip("promtool not found: run scripts/install-test-deps.sh as root (make test does) or set CNPERF_PROMTOOL")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, promtoolBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestAlertRules: promtool check rules and promtool test rules pass.
func TestAlertRules(t *testing.T) {
	t.Logf("%s", promtool(t, "check", "rules", "cnperf-alerts.yaml"))
	t.Logf("%s", promtool(t, "test", "rules", "cnperf-alerts_test.yaml"))
}

// TestRulesNameExportedMetrics: a rule on a metric cnperf does not
// export would never fire.
func TestRulesNameExportedMetrics(t *testing.T) {
	ch := make(chan *prom.Desc, 64)
	go func() { metrics.New(nil, metrics.Options{}).Describe(ch); close(ch) }()
	exported := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	if len(exported) == 0 {
		t.Fatal("the exporter describes no metrics")
	}
	files, _ := filepath.Glob("*.yaml")
	used := regexp.MustCompile(`cnperf_[a-z_]+`)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range used.FindAllString(string(data), -1) {
			n++
			if !exported[name] {
				t.Errorf("%s names %s, which cnperf does not export (it exports %v)", f, name, exported)
			}
		}
	}
	if n == 0 {
		t.Error("the rules name no cnperf metric")
	}
}
