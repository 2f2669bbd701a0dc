package report_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/report/reporttest"
)

// TestWriteExampleHTML writes the example report to $CNPERF_REPORT_OUT
// when set, to look at it in a browser; otherwise it only checks that the
// page renders.
func TestWriteExampleHTML(t *testing.T) {
	r := reporttest.Example()
	dir := os.Getenv("CNPERF_REPORT_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	f, err := os.Create(filepath.Join(dir, "example.html"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := r.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
}

// TestWriteExampleSVGs writes each chart of the example as its own SVG
// file to $CNPERF_REPORT_OUT/svg when set.
func TestWriteExampleSVGs(t *testing.T) {
	dir := os.Getenv("CNPERF_REPORT_OUT")
	if dir == "" {
		t.Skip("CNPERF_REPORT_OUT not set: nothing to write")
	}
	dir = filepath.Join(dir, "svg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range reporttest.Example().Charts() {
		f, err := os.Create(filepath.Join(dir, c.ID+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		if err := report.WriteSVG(f, c); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
