package figure

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records what Check says.
type recorder struct {
	testing.TB
	logs, errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

// TestCheck: a met figure and a missed one are logged; a miss fails the
// test only with CNPERF_FIGURES=strict.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      string
		met      bool
		wantErrs int
	}{
		{"met", "", true, 0},
		{"missed, make test", "", false, 0},
		{"missed, strict", "strict", false, 1},
		{"met, strict", "strict", true, 0},
		{"missed, other value", "1", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			r := &recorder{}
			Check(r, tc.met, "share %.1f %%", 42.0)
			if len(r.errs) != tc.wantErrs || len(r.errs)+len(r.logs) != 1 {
				t.Fatalf("logs %q, errors %q; want %d error(s) and one line in all", r.logs, r.errs, tc.wantErrs)
			}
			line := append(r.logs, r.errs...)[0]
			if want := "share 42.0 %"; !strings.Contains(line, want) {
				t.Errorf("%q does not say %q", line, want)
			}
			if !tc.met && !strings.Contains(line, "MISSED") && !strings.Contains(line, "missed") {
				t.Errorf("%q does not say the figure was missed", line)
			}
		})
	}
}
