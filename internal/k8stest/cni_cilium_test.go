package k8stest

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCiliumBackends: vxlan and native run; geneve and wireguard are
// refused saying which kernel module is missing; unknown modes are named.
func TestCiliumBackends(t *testing.T) {
	for _, tc := range []struct{ backend, err string }{
		{backend: "vxlan"},
		{backend: "native"},
		{backend: "geneve", err: "geneve module"},
		{backend: "wireguard", err: "wireguard module"},
		{backend: "direct", err: "runs vxlan, native"},
	} {
		err := checkCiliumBackend(tc.backend)
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", tc.backend, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: err %v, want one saying %q", tc.backend, err, tc.err)
		}
	}
}

// TestCiliumAgentArgs: every path the agent writes is the node's own, the
// mode's flags follow the backend, and the settings two agents on one
// kernel need are there.
func TestCiliumAgentArgs(t *testing.T) {
	c := &Cluster{RunDir: "/run/x", BinDir: "/bin/y"}
	n := &Node{Name: "kcn-node2"}
	for _, tc := range []struct {
		backend   string
		want, not []string
	}{
		{"vxlan", []string{"--routing-mode=tunnel", "--tunnel-protocol=vxlan", "--tunnel-port=8472"}, []string{"--routing-mode=native"}},
		{"native", []string{"--routing-mode=native", "--auto-direct-node-routes=true", "--ipv4-native-routing-cidr=" + clusterCIDR}, []string{"--routing-mode=tunnel"}},
	} {
		k := &Cilium{Backend: tc.backend, kubeconfig: "/kc"}
		args := k.args(c, n)
		dir := filepath.Join("/run/x", "kcn-node2", "cilium")
		common := []string{"--ipam=kubernetes", "--identity-allocation-mode=crd", "--bpf-lb-sock=false", "--kube-proxy-replacement=false",
			"--bpf-root=" + dir + "/bpffs", "--state-dir=" + dir + "/run", "--socket-path=" + dir + "/run/cilium.sock",
			"--lib-dir=/bin/y/cilium-" + CiliumVersion, "--k8s-kubeconfig-path=/kc", "--cni-exclusive=false"}
		for _, w := range append(common, tc.want...) {
			if !slices.Contains(args, w) {
				t.Errorf("%s: args lack %s: %v", tc.backend, w, args)
			}
		}
		for _, w := range tc.not {
			if slices.Contains(args, w) {
				t.Errorf("%s: args have %s", tc.backend, w)
			}
		}
		if env := k.RuntimeEnv(c, n); len(env) != 1 || env[0] != "CILIUM_SOCK="+dir+"/run/cilium.sock" {
			t.Errorf("runtime env %v", env)
		}
	}
}

// TestCiliumConflist: cilium-cni first (its log in the node's directory),
// then the bandwidth plugin and portmap with their capabilities.
func TestCiliumConflist(t *testing.T) {
	var conf struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(ciliumConflist("/run/x/n/cilium/cni.log"), &conf); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p["type"].(string))
	}
	if !slices.Equal(types, []string{"cilium-cni", "bandwidth", "portmap"}) || conf.Plugins[0]["log-file"] != "/run/x/n/cilium/cni.log" {
		t.Errorf("conflist %+v", conf)
	}
	if caps, _ := conf.Plugins[1]["capabilities"].(map[string]any); caps["bandwidth"] != true {
		t.Errorf("bandwidth plugin without its capability: %v", conf.Plugins[1])
	}
	if got := (&Cilium{Backend: "native"}).Facts(); !slices.Equal(got.Plugins, types) || got.String() != "cilium native" || got.Version != CiliumVersion {
		t.Errorf("facts %+v", got)
	}
}

// TestRemoveStaleSockets: the sockets an exited agent left are removed
// before the next agent binds the same path (a stale monitor socket made
// native mode's agent fail with "address already in use"); a missing path
// is fine and a file that is not a socket is refused and kept.
func TestRemoveStaleSockets(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "monitor1_2.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // as a killed agent leaves it
	l.Close()
	if !isSocket(stale) {
		t.Fatalf("%s: no stale socket to remove", stale)
	}
	if _, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"}); err == nil {
		t.Fatal("binding over a stale socket file succeeded; the test's premise is wrong")
	}
	missing := filepath.Join(dir, "cilium.sock")
	if err := removeStaleSockets(stale, missing); err != nil {
		t.Fatalf("removeStaleSockets: %v", err)
	}
	if isSocket(stale) {
		t.Errorf("%s still there", stale)
	}
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatalf("bind after the cleanup: %v", err)
	}
	l.Close()

	regular := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeStaleSockets(regular); err == nil || !strings.Contains(err.Error(), "not a stale socket") {
		t.Errorf("a regular file: %v, want it refused", err)
	}
	if _, err := os.Stat(regular); err != nil {
		t.Errorf("the regular file was removed: %v", err)
	}
}
