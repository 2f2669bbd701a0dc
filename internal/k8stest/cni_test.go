package k8stest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBridgeConflistMatchesFacts: the conflist the bridge CNI writes
// chains exactly the plugins its facts name, on the node's subnet.
func TestBridgeConflistMatchesFacts(t *testing.T) {
	n := &Node{Name: "kcn-node1", CNIDir: t.TempDir()}
	if err := writeBridgeConflist(n, "10.245.1.0/24", 1450, "/ipam"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(n.CNIDir, "10-cnperf-harness.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
			IPAM struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	if want := (Bridge{}).Facts().Plugins; !slices.Equal(types, want) {
		t.Errorf("plugins %v, facts say %v", types, want)
	}
	if p := conf.Plugins[0]; p.MTU != 1450 || len(p.IPAM.Ranges) != 1 || p.IPAM.Ranges[0][0].Subnet != "10.245.1.0/24" {
		t.Errorf("bridge plugin: mtu %d ranges %+v", p.MTU, p.IPAM.Ranges)
	}
}
