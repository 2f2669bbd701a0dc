package k8stest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestFlannelConflistFromSubnetEnv: the conflist written from flanneld's
// subnet.env is what flannel's CNI plugin hands the bridge plugin: the
// node's subnet (as a network), flannel's MTU, the flannel network routed,
// the bridge masquerading only when flanneld does not; bad files are
// refused naming the key.
func TestFlannelConflistFromSubnetEnv(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, env, err string
		mtu            int
		masq           bool
	}{
		{name: "vxlan", env: "FLANNEL_NETWORK=10.245.0.0/16\nFLANNEL_SUBNET=10.245.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", mtu: 1450},
		{name: "host-gw, no masquerade", env: "FLANNEL_NETWORK=10.245.0.0/16\nFLANNEL_SUBNET=10.245.1.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n", mtu: 1500, masq: true},
		{name: "no subnet", env: "FLANNEL_NETWORK=10.245.0.0/16\nFLANNEL_MTU=1500\n", err: "FLANNEL_SUBNET"},
		{name: "bad mtu", env: "FLANNEL_NETWORK=10.245.0.0/16\nFLANNEL_SUBNET=10.245.1.1/24\nFLANNEL_MTU=x\n", err: "FLANNEL_MTU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "subnet.env")
			if err := os.WriteFile(path, []byte(tc.env), 0o644); err != nil {
				t.Fatal(err)
			}
			env, err := readSubnetEnv(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := &Node{CNIDir: t.TempDir()}
			os.WriteFile(filepath.Join(n.CNIDir, "10-cnperf-harness.conflist"), []byte("{}"), 0o644)
			if err := writeFlannelConflist(n, env, "/ipam"); err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(n.CNIDir)
			if len(ents) != 1 || ents[0].Name() != "10-flannel.conflist" {
				t.Fatalf("CNI dir holds %v, want only 10-flannel.conflist", ents)
			}
			b, _ := os.ReadFile(filepath.Join(n.CNIDir, "10-flannel.conflist"))
			var conf struct {
				Plugins []struct {
					Type      string `json:"type"`
					MTU       int    `json:"mtu"`
					IPMasq    bool   `json:"ipMasq"`
					DefaultGW bool   `json:"isDefaultGateway"`
					IPAM      struct {
						Ranges [][]struct{ Subnet string } `json:"ranges"`
						Routes []struct{ Dst string }      `json:"routes"`
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
			if want := (&Flannel{}).Facts().Plugins; !slices.Equal(types, want) {
				t.Errorf("plugins %v, facts say %v", types, want)
			}
			p := conf.Plugins[0]
			if p.MTU != tc.mtu || p.IPMasq != tc.masq || !p.DefaultGW || p.IPAM.Ranges[0][0].Subnet != "10.245.1.0/24" ||
				len(p.IPAM.Routes) != 1 || p.IPAM.Routes[0].Dst != "10.245.0.0/16" {
				t.Errorf("bridge delegate %+v", p)
			}
		})
	}
}
