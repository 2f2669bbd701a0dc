package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kubectlBin finds a kubectl for `kubectl kustomize`: $CNPERF_KUBECTL or
// the real-cluster harness's cache; else the test skips (the packaged
// /usr/bin/kubectl may be too old for the base's fields).
func kubectlBin(t *testing.T) string {
	if p := os.Getenv("CNPERF_KUBECTL"); p != "" {
		return p
	}
	if m, _ := filepath.Glob("/var/cache/cnperf-k8s/bin-v*/kubectl"); len(m) > 0 {
		return m[len(m)-1]
	}
	t.Skip("no kubectl: set CNPERF_KUBECTL or build the harness's binaries (make test-k8s)")
	return ""
}

// TestOverlaysMatchRender: `kubectl kustomize` of each overlay gives the
// same objects as Render with the options `cnperf k8s deploy` takes for
// it, so the overlays users apply and the deploy cannot drift apart.
func TestOverlaysMatchRender(t *testing.T) {
	kubectl := kubectlBin(t)
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes")
	for _, tt := range []struct {
		overlay string
		opts    DeployOptions
	}{
		{"base", DeployOptions{TLS: true}},
		{"overlays/nodeport", DeployOptions{NodePort: 30001, TLS: true}},
		{"overlays/postgres", DeployOptions{PostgresSecret: "cnperf-postgres", TLS: true}},
		{"overlays/plain-http", DeployOptions{}},
		{"overlays/host-agents", DeployOptions{HostAgents: true, TLS: true}},
		{"overlays/qos-agents", DeployOptions{QoSAgents: true, TLS: true}},
		{"overlays/privileged", DeployOptions{HostAgents: true, QoSAgents: true, TLS: true}},
	} {
		t.Run(tt.overlay, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(dir, tt.overlay)).Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v", tt.overlay, err)
			}
			got := map[string][]byte{}
			rd := utilyaml.NewYAMLReader(bufioReader(out))
			for {
				doc, err := rd.Read()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				obj, err := DecodeStrict(Document{File: tt.overlay, YAML: doc})
				if err != nil {
					t.Fatal(err)
				}
				k, j := objectJSON(t, obj)
				got[k] = j
			}
			objs, err := Render(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != len(got) {
				t.Errorf("kustomize made %d objects, Render %d", len(got), len(objs))
			}
			for _, o := range objs {
				k, want := objectJSON(t, o)
				if !bytes.Equal(got[k], want) {
					t.Errorf("%s differs:\nkustomize:\n%s\nRender:\n%s", k, got[k], want)
				}
			}
		})
	}
}

func objectJSON(t *testing.T, obj kruntime.Object) (string, []byte) {
	t.Helper()
	u, err := ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.MarshalIndent(u.Object, "", " ")
	return u.GetKind() + "/" + u.GetName(), j
}
