package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOutputFormats: -o json|yaml|wide on the printing verbs, as kubectl
// has it; --json stays -o json; a bad -o is refused before anything is
// asked of the server.
func TestOutputFormats(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	t.Setenv("CNPERF_TOKEN", "")
	t.Setenv("CNPERF_USER_TOKEN", "")
	url, _, _, _ := reportFixture(t)
	srv := []string{"--server", url, "--token", "u-tok"}
	for _, verb := range [][]string{{"clients"}, {"task", "list"}, {"schedule", "list"}, {"version"}} {
		args := verb
		if verb[0] != "version" {
			args = append(append([]string{}, verb...), srv...)
		}
		name := strings.Join(verb, " ")
		asJSON, _, err := runCLI(t, append(args, "-o", "json")...)
		if err != nil || !json.Valid([]byte(asJSON)) {
			t.Fatalf("%s -o json: %v\n%s", name, err, asJSON)
		}
		old, _, err := runCLI(t, append(args, "--json")...)
		if err != nil || old != asJSON {
			t.Errorf("%s --json differs from -o json (%v):\n%s\nvs\n%s", name, err, old, asJSON)
		}
		asYAML, _, err := runCLI(t, append(args, "-o", "yaml")...)
		if err != nil {
			t.Fatalf("%s -o yaml: %v", name, err)
		}
		fromYAML, err := yaml.YAMLToJSON([]byte(asYAML))
		if err != nil {
			t.Fatalf("%s -o yaml is not YAML: %v\n%s", name, err, asYAML)
		}
		var a, b any
		_ = json.Unmarshal([]byte(asJSON), &a)
		_ = json.Unmarshal(fromYAML, &b)
		if ja, _ := json.Marshal(a); string(ja) != string(mustJSON(t, b)) {
			t.Errorf("%s: -o yaml holds other data than -o json:\n%s\nvs\n%s", name, asYAML, asJSON)
		}
		if _, _, err := runCLI(t, append(args, "-o", "xml")...); err == nil || !strings.Contains(err.Error(), `-o "xml": want one of table, wide, json, yaml`) {
			t.Errorf("%s -o xml: %v, want a refusal naming the formats", name, err)
		}
		if _, _, err := runCLI(t, append(args, "--json", "-o", "yaml")...); err == nil || !strings.Contains(err.Error(), "give one") {
			t.Errorf("%s --json -o yaml: %v, want a refusal", name, err)
		}
	}
	table, _, err := runCLI(t, append([]string{"clients"}, srv...)...)
	if err != nil {
		t.Fatal(err)
	}
	wide, _, err := runCLI(t, append([]string{"clients", "-o", "wide"}, srv...)...)
	if err != nil {
		t.Fatal(err)
	}
	head := func(s string) string { return strings.SplitN(s, "\n", 2)[0] }
	if strings.Contains(head(table), "REGISTERED") || !strings.Contains(head(wide), "REGISTERED") || !strings.HasPrefix(head(wide), strings.TrimSpace(head(table))[:20]) {
		t.Errorf("clients -o wide should add columns to the table:\n%s\nvs\n%s", head(table), head(wide))
	}
	// A bad -o costs no call: the server URL here would refuse it.
	if _, _, err := runCLI(t, "clients", "--server", "http://127.0.0.1:1", "--token", "t", "-o", "xml"); err == nil || strings.Contains(err.Error(), "connection refused") {
		t.Errorf("clients -o xml against a closed port: %v, want the format refused first", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
