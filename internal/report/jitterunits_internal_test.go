package report

import "testing"

// TestJitterUnits: a jitter (and any figure in ms) is printed in the unit
// that gives it three significant digits before the point where it can:
// 13.1 µs, not 0.0131 ms; 17.6 ns, not 0.0176 µs.
func TestJitterUnits(t *testing.T) {
	unit := Info("jitter_ms").Unit
	for _, tc := range []struct {
		ms   float64
		want string
	}{
		{0.0131, "13.1 µs"},
		{1.76e-5, "17.6 ns"},
		{0.5, "500 µs"},
		{2.5, "2.50 ms"},
		{0, "0 ms"},
	} {
		if got := Format(tc.ms, unit); got != tc.want {
			t.Errorf("Format(%g ms) = %q, want %q", tc.ms, got, tc.want)
		}
	}
	if got, want := FormatRange(1.76e-5, 3.24e-6, 3.2e-5, unit), "17.6 ns (3.24–32.0)"; got != want {
		t.Errorf("FormatRange = %q, want %q", got, want)
	}
}
