package k8stest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestSeed002Table: the seed-002 table picks the seed's six measurements
// per connection from `cnperf compare --format json`, in the seed's units,
// with the seed's figures beside Calico's cross-node row only.
func TestSeed002Table(t *testing.T) {
	cmp := `{"Lines": [
	 {"Connection": "pod-pod cross node", "Metric": "throughput_bps.sender", "Ref": {"Median": 2.5e9}, "HasRef": true, "Others": [{"stat": {"Median": 1.2e10}}]},
	 {"Connection": "pod-pod cross node", "Metric": "cpu_pct.receiver", "Ref": {"Median": 14.5}, "HasRef": true, "Others": [{"stat": {"Median": 30}}]},
	 {"Connection": "pod-pod cross node", "Metric": "rtt_ms.avg", "Ref": {"Median": 0.2}, "HasRef": true, "Others": [{"stat": {"Median": 0.1}}]},
	 {"Connection": "node-node", "Metric": "bytes.receiver", "Ref": {"Median": 5.67e8}, "HasRef": true, "Others": [{"stat": {"Median": 6e8}}]}]}`
	out, err := seed002Table("calico", [2]string{"vxlan", "direct"}, cmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"calico vxlan", "seed Direct", "Bitrate (sender)", "2.5 Gbit/s", "12 Gbit/s", "2.58 / 2.78 Gbit/s", "16.1 / 15.4 Gbit/s", "CPU (receiver)", "0.567 GB"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rtt") || strings.Count(out, "\n") != 4 {
		t.Errorf("want a header and three rows of the seed's measurements:\n%s", out)
	}
	if out, _ := seed002Table("flannel", [2]string{"vxlan", "host-gw"}, cmp); strings.Contains(out, "seed") {
		t.Errorf("the seed's Calico figures beside flannel:\n%s", out)
	}
	if _, err := seed002Table("calico", [2]string{"vxlan", "direct"}, `{"Lines": []}`); err == nil {
		t.Error("an empty comparison gave a table")
	}
}
