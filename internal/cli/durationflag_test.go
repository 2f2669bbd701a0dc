package cli

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestParseSecondsOrDuration(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"bare seconds as iperf3's -t", "2", 2 * time.Second, false},
		{"fractional seconds", "2.5", 2500 * time.Millisecond, false},
		{"zero", "0", 0, false},
		{"negative seconds (refused later by the probe)", "-1", -time.Second, false},
		{"duration", "2s", 2 * time.Second, false},
		{"milliseconds", "500ms", 500 * time.Millisecond, false},
		{"compound", "1m30s", 90 * time.Second, false},
		{"unknown unit", "2x", 0, true},
		{"empty", "", 0, true},
		{"not a number", "NaN", 0, true},
		{"infinite", "Inf", 0, true},
		{"too long", "1e12", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSecondsOrDuration(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parse %q = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parse %q = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestSuiteTimeBareSeconds checks the --time of cnperf run and cnperf lab
// run (one flag set) takes bare seconds, and keeps its default.
func TestSuiteTimeBareSeconds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 5 * time.Second},
		{[]string{"--time", "2"}, 2 * time.Second},
		{[]string{"--time", "750ms"}, 750 * time.Millisecond},
	} {
		var f suiteFlags
		cmd := &cobra.Command{Use: "run"}
		f.register(cmd, "", "")
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if f.time != tc.want {
			t.Errorf("%v: time %v, want %v", tc.args, f.time, tc.want)
		}
	}
}

// TestProbeTimeBareSeconds runs `cnperf probe tcp --time 1` (and -t 1)
// against a responder: the test lasts about a second.
func TestProbeTimeBareSeconds(t *testing.T) {
	addr, _ := startResponder(t)
	for _, flag := range []string{"--time", "-t"} {
		t.Run(flag, func(t *testing.T) {
			code, out, errs := cnperf(t, 20*time.Second, "probe", "tcp", "--to", addr, flag, "1", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var res struct {
				DurationS float64 `json:"duration_s"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("decode %q: %v", out, err)
			}
			if math.Abs(res.DurationS-1) > 0.5 {
				t.Errorf("duration_s %.3f, want about 1 (bare seconds)", res.DurationS)
			}
		})
	}
}
