package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestK8sVerbsBadInput: each verb fails fast with a message naming the
// problem, without a cluster.
func TestK8sVerbsBadInput(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"status without kubeconfig", []string{"k8s", "status"}, "no kubeconfig"},
		{"deploy with missing kubeconfig", []string{"k8s", "deploy", "--kubeconfig", "/nonexistent/kc"}, "/nonexistent/kc does not exist"},
		{"deploy bad pull policy", []string{"k8s", "deploy", "--image-pull-policy", "Sometimes"}, "image pull policy"},
		{"deploy bad node port", []string{"k8s", "deploy", "--node-port", "80"}, "node port 80"},
		{"certs with missing kubeconfig", []string{"k8s", "certs", "--kubeconfig", "/nonexistent/kc"}, "/nonexistent/kc does not exist"},
		{"undeploy without kubeconfig", []string{"k8s", "undeploy"}, "no kubeconfig"},
		{"run --k8s without kubeconfig", []string{"run", "baseline", "--k8s"}, "no kubeconfig"},
		{"run --k8s with --server", []string{"run", "baseline", "--k8s", "--server", "http://127.0.0.1:1"}, "exclude each other"},
		{"image build without -o", []string{"image", "build"}, "-o FILE"},
		{"image build bad format", []string{"image", "build", "-o", t.TempDir() + "/x.tar", "--format", "zip"}, `format "zip"`},
		{"image build dynamic binary", []string{"image", "build", "-o", t.TempDir() + "/x.tar", "--binary", "/bin/ls"}, "CGO_ENABLED=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			err := Run(ctx, tc.args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one saying %q", err, tc.want)
			}
		})
	}
}

// TestLabelCNI: rows of a --k8s run carry the cluster's CNI as `cni`, its
// release as `cni_version` (when known) and its backend as `backend`; a CNI
// with no backend leaves backend empty.
func TestLabelCNI(t *testing.T) {
	for _, tc := range []struct {
		facts                     k8s.Facts
		wantCNI, wantBck, wantVer string
	}{
		{k8s.Facts{CNIName: "flannel", Backend: "vxlan"}, "flannel", "vxlan", ""},
		{k8s.Facts{CNIName: "flannel", Backend: "host-gw"}, "flannel", "host-gw", ""},
		{k8s.Facts{CNIName: "calico", CNIVersion: "v3.31.0", Backend: "direct"}, "calico", "direct", "v3.31.0"},
		{k8s.Facts{CNIName: "bridge"}, "bridge", "", ""},
	} {
		rows := []suite.Row{{Connection: "pod-pod cross node"}, {Connection: "node-node", Labels: map[string]string{"x": "y"}}}
		tc.facts.LabelRows(rows)
		for _, r := range rows {
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if m["cni"] != tc.wantCNI || m["backend"] != tc.wantBck {
				t.Errorf("%s: row JSON cni %v backend %v, want %q %q", tc.facts.CNIName, m["cni"], m["backend"], tc.wantCNI, tc.wantBck)
			}
			if v, _ := m["cni_version"].(string); v != tc.wantVer {
				t.Errorf("%s: row JSON cni_version %q, want %q", tc.facts.CNIName, v, tc.wantVer)
			}
		}
	}
}
