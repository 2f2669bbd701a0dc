package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSuitesVerb(t *testing.T) {
	out, _, err := runCLI(t, "suites", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var infos []suiteInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("cnperf suites --json: %v\n%s", err, out)
	}
	if len(infos) != len(suites().Names()) {
		t.Fatalf("listed %d suites, the registry has %d", len(infos), len(suites().Names()))
	}
	for _, in := range infos {
		if len(in.Keys) == 0 {
			t.Errorf("suite %s: no keys listed", in.Name)
		}
	}
	out, _, err = runCLI(t, "suites", "shaping")
	if err != nil || !strings.Contains(out, "egress-bandwidth") || strings.Contains(out, "udp-rate") {
		t.Errorf("cnperf suites shaping: %v\n%s", err, out)
	}
	if _, _, err := runCLI(t, "suites", "nosuch"); err == nil || !strings.Contains(err.Error(), `unknown suite "nosuch"`) {
		t.Errorf("cnperf suites nosuch: %v", err)
	}
}

// TestSuiteHelpAndUnknownKeys: a suite's --help lists its own keys, and
// an unknown key is refused before a lab or a run is made (no root, no
// server needed to get the refusal).
func TestSuiteHelpAndUnknownKeys(t *testing.T) {
	cases := []struct {
		args    []string
		want    string
		notWant string
	}{
		{[]string{"lab", "run", "shaping", "--help"}, "burst", "udp-rate"},
		{[]string{"lab", "run", "capacity", "--help"}, "trial-time", "egress-bandwidth"},
		{[]string{"run", "qos-priority", "--help"}, "bottleneck-rate", "stamp-count"},
	}
	for _, tc := range cases {
		out, _, err := runCLI(t, tc.args...)
		if err != nil || !strings.Contains(out, "Settings of") || !strings.Contains(out, tc.want) || strings.Contains(out, tc.notWant) {
			t.Errorf("%v: err %v, output lacks %q or has %q:\n%s", tc.args, err, tc.want, tc.notWant, out)
		}
	}
	for _, args := range [][]string{
		{"lab", "run", "shaping", "--set", "bottleneck-rate=1G"},
		{"run", "baseline", "--set", "bogus=1", "--server", "http://127.0.0.1:1"},
	} {
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), "unknown setting") || !strings.Contains(err.Error(), "it takes:") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestCompletion(t *testing.T) {
	out, _, err := runCLI(t, "__complete", "lab", "run", "shaping", "--set", "eg")
	if err != nil || !strings.Contains(out, "egress-bandwidth=") {
		t.Errorf("--set completion: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "__complete", "run", "ca")
	if err != nil || !strings.Contains(out, "capacity") {
		t.Errorf("suite completion: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "__start_cnperf") {
		t.Errorf("completion bash: %v\n%.200s", err, out)
	}
}
