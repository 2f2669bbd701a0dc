// Package promtooltest finds and runs Prometheus's promtool for tests: the
// alert rules' checks (deploy/prometheus) and the exposition check of
// /metrics (internal/metrics). promtool comes from $CNPERF_PROMTOOL, the
// PATH, or the cache scripts/install-test-deps.sh fills (make test runs
// it); without it a test skips and says how to get it.
package promtooltest

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// cachePath is where scripts/install-test-deps.sh puts promtool.
const cachePath = "/var/cache/cnperf-tools/promtool/promtool"

// Path returns promtool's path, or skips t when there is none.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CNPERF_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat(cachePath); err == nil {
		return cachePath
	}
	t.Skip("promtool not found: run scripts/install-test-deps.sh as root (make test does) or set CNPERF_PROMTOOL")
	return ""
}

// Run runs promtool with args and stdin (nil: none) under a minute's
// deadline and returns its combined output; it fails t when promtool
// exits non-zero.
func Run(t testing.TB, stdin io.Reader, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, Path(t), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
