// Package prometheus holds the tests of cnperf's Prometheus alert rules
// (cnperf-alerts.yaml): promtool checks them and runs their unit tests,
// and every metric they name must be one cnperf's /metrics exports.
package prometheus

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/metrics/promtooltest"
)

// TestAlertRules: promtool check rules and promtool test rules pass.
func TestAlertRules(t *testing.T) {
	t.Logf("%s", promtooltest.Run(t, nil, "check", "rules", "cnperf-alerts.yaml"))
	t.Logf("%s", promtooltest.Run(t, nil, "test", "rules", "cnperf-alerts_test.yaml"))
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
