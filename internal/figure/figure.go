// Package figure reports, in a test, a figure measured against what a
// quiet machine achieves (a rate, a share, a latency, a ratio, a verdict
// that follows from them). What a machine achieves is a benchmark's
// verdict, not a test's: on a busy 2-core machine a CPU hog beside the
// test can miss it with nothing wrong in cnperf. So Check logs a miss,
// and fails the test only with CNPERF_FIGURES=strict (make bench-lab,
// serialised on a quiet machine). Checks that hold on any machine
// (structure, units, allowed values, physical bounds) stay t.Errorf in
// the tests.
package figure

import (
	"fmt"
	"os"
	"testing"
)

// Env set to "strict" makes Check fail a test whose figure was missed
// (make bench-lab sets it); otherwise a miss is logged.
const Env = "CNPERF_FIGURES"

// Check reports a figure: met logs it, a miss is logged or, with
// CNPERF_FIGURES=strict, fails the test.
func Check(t testing.TB, met bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	switch {
	case met:
		t.Logf("figure met: %s", msg)
	case os.Getenv(Env) == "strict":
		t.Errorf("figure missed (%s=strict): %s", Env, msg)
	default:
		t.Logf("FIGURE MISSED (a benchmark's verdict, not asserted here; %s=strict asserts it): %s", Env, msg)
	}
}
