package k8stest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRecordMerge: each CNI's run of the real-cluster test merges into
// the one CNPERF_K8S_REPORT file: other CNIs' suites and facts stay, its
// own are replaced (a rerun does not pile up).
func TestRecordMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k8s.json")
	suites := func(cni string, backends ...string) []suiteRecord {
		var out []suiteRecord
		for _, b := range backends {
			out = append(out, suiteRecord{Suite: "baseline", CNI: cni, Backend: b, RunIDs: []string{cni + "-" + b}})
		}
		return out
	}
	facts := func(cni string) map[string]json.RawMessage {
		return map[string]json.RawMessage{cni: json.RawMessage(`{"cni_name":"` + cni + `"}`)}
	}
	steps := []clusterRecord{
		{Cluster: json.RawMessage(`{"cni_name":"flannel"}`), Clusters: facts("flannel"), Suites: suites("flannel", "vxlan", "host-gw")},
		{Cluster: json.RawMessage(`{"cni_name":"calico"}`), Clusters: facts("calico"), Suites: suites("calico", "vxlan", "direct")},
		{Cluster: json.RawMessage(`{"cni_name":"calico"}`), Clusters: facts("calico"), Suites: suites("calico", "vxlan")},
	}
	for _, r := range steps {
		if err := r.write(path); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got clusterRecord
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got.Suites {
		ids = append(ids, s.RunIDs...)
	}
	if want := []string{"flannel-vxlan", "flannel-host-gw", "calico-vxlan"}; !slices.Equal(ids, want) {
		t.Errorf("suites %v, want %v", ids, want)
	}
	if len(got.Clusters) != 2 || got.Clusters["flannel"] == nil || got.Clusters["calico"] == nil {
		t.Errorf("clusters %v, want flannel's and calico's", got.Clusters)
	}
	var first bytes.Buffer
	if err := json.Compact(&first, got.Cluster); err != nil || first.String() != `{"cni_name":"flannel"}` {
		t.Errorf("cluster %s, want the first recorded", got.Cluster)
	}
	os.WriteFile(path, []byte("not json"), 0o644)
	if err := steps[0].write(path); err == nil {
		t.Error("a corrupt record was overwritten without an error")
	}
}
