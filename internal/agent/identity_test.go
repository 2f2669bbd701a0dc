package agent

import (
	"strings"
	"testing"
)

// TestIdentityNodeLabels: CNPERF_NODE_LABELS gives the node labels the
// agent reports; a pair without a value or too many are refused, naming
// the variable.
func TestIdentityNodeLabels(t *testing.T) {
	base := map[string]string{EnvPodName: "p", EnvPodUID: "u", EnvPodIP: "10.0.0.1", EnvNodeName: "n"}
	for _, tc := range []struct {
		labels string
		want   map[string]string
		err    string
	}{
		{"", nil, ""},
		{"topology.kubernetes.io/zone=eu-1a, rack=r7", map[string]string{"topology.kubernetes.io/zone": "eu-1a", "rack": "r7"}, ""},
		{"rack", nil, EnvNodeLabels},
		{"a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", nil, "at most 8"},
	} {
		env := map[string]string{EnvNodeLabels: tc.labels}
		for k, v := range base {
			env[k] = v
		}
		id := IdentityFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		err := id.Complete()
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.labels, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.labels, err)
		case len(id.NodeLabels) != len(tc.want):
			t.Errorf("%q: labels %v, want %v", tc.labels, id.NodeLabels, tc.want)
		default:
			for k, v := range tc.want {
				if id.NodeLabels[k] != v {
					t.Errorf("%q: labels %v, want %v", tc.labels, id.NodeLabels, tc.want)
				}
			}
		}
	}
}
