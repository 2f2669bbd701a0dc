package cli

import (
	"strings"
	"testing"
)

// TestTokenPlaces: the login page's help names the file the server read,
// the Secret its Deployment names (with a kubectl command for its
// namespace), or, when the server knows neither, where each install keeps
// the token.
func TestTokenPlaces(t *testing.T) {
	for _, tc := range []struct {
		name, file, secret, ns string
		want                   []string
	}{
		{"file", "/etc/cnperf/user-token", "", "", []string{"the file /etc/cnperf/user-token", "cat /etc/cnperf/user-token"}},
		{"helm existing secret", "", "perf-secret", "perf",
			[]string{"Secret perf-secret (key user-token) in namespace perf", "kubectl -n perf get secret perf-secret -o jsonpath='{.data.user-token}' | base64 -d"}},
		{"by hand", "", "", "", []string{"kubectl -n cnperf get secret cnperf-tokens", "/run/cnperf/lab/NAME.d/user.env", "CNPERF_USER_TOKEN it was started with"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all strings.Builder
			for _, p := range tokenPlaces(tc.file, tc.secret, tc.ns) {
				all.WriteString(p.Install + "\n" + p.Where + "\n" + p.Command + "\n")
			}
			for _, w := range tc.want {
				if !strings.Contains(all.String(), w) {
					t.Errorf("lacks %q:\n%s", w, all.String())
				}
			}
		})
	}
}
