package agent

import (
	"maps"
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

// TestIdentityZoneRegion: CNPERF_ZONE and CNPERF_REGION, which the
// installs fill from the pod's topology labels, become the node labels
// topology.kubernetes.io/zone and region; empty (a cluster that does not
// copy them) gives no label and no error; CNPERF_NODE_LABELS, then
// --node-label (AddNodeLabels), win key by key.
func TestIdentityZoneRegion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  map[string]string
	}{
		{"zone and region", map[string]string{EnvZone: "eu-1a", EnvRegion: "eu-1"}, nil,
			map[string]string{LabelZone: "eu-1a", LabelRegion: "eu-1"}},
		{"zone only", map[string]string{EnvZone: " eu-1a ", EnvRegion: ""}, nil,
			map[string]string{LabelZone: "eu-1a"}},
		{"empty: no label", map[string]string{EnvZone: "", EnvRegion: ""}, nil, nil},
		{"unset: no label", map[string]string{}, nil, nil},
		{"CNPERF_NODE_LABELS wins", map[string]string{EnvZone: "eu-1a", EnvNodeLabels: LabelZone + "=lab-2,rack=r7"}, nil,
			map[string]string{LabelZone: "lab-2", "rack": "r7"}},
		{"--node-label wins", map[string]string{EnvZone: "eu-1a", EnvRegion: "eu-1", EnvNodeLabels: "rack=r7"},
			map[string]string{LabelZone: "lab-3", "rack": "r9"},
			map[string]string{LabelZone: "lab-3", LabelRegion: "eu-1", "rack": "r9"}},
		{"--node-label alone", map[string]string{}, map[string]string{LabelZone: "lab-3"},
			map[string]string{LabelZone: "lab-3"}},
	} {
		env := map[string]string{EnvPodName: "p", EnvPodUID: "u", EnvPodIP: "10.0.0.1", EnvNodeName: "n"}
		for k, v := range tc.env {
			env[k] = v
		}
		id := IdentityFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		id.AddNodeLabels(tc.flags)
		if err := id.Complete(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !maps.Equal(id.NodeLabels, tc.want) || (tc.want == nil) != (id.NodeLabels == nil) {
			t.Errorf("%s: labels %v, want %v", tc.name, id.NodeLabels, tc.want)
		}
	}
}
