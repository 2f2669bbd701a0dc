package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/bundle"
	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestCompareBundleFiles compares seven bundle files (a.json ... g.json)
// with no server (CNPERF_SERVER names a port nothing listens on: asking
// it would fail) and renders one with cnperf report FILE.
func TestCompareBundleFiles(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "http://127.0.0.1:1")
	dir := t.TempDir()
	var files []string
	for i, cni := range []string{"flannel", "calico", "cilium", "kindnet", "weave", "antrea", "kube-router"} {
		res := &evaluate.Result{Sheet: evaluate.Sheet{Lines: []evaluate.Line{{Question: evaluate.QOverlay, Scope: suite.PodPodCrossNode,
			Verdict: evaluate.Measured, Reason: "r", Key: &evaluate.Figure{Name: "throughput_bps.receiver", Value: float64(i+1) * 1e9, Unit: "bit/s"}}}},
			Reports: []suite.Report{{Suite: "baseline", Environment: &hostinfo.Environment{Platform: "kubernetes", CNI: cni, Backend: "vxlan"}}}}
		f := filepath.Join(dir, string(rune('a'+i))+".json")
		var buf bytes.Buffer
		b, err := bundle.New(res, "test", time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Write(&buf); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var out, errb bytes.Buffer
	code := Main(append([]string{"compare", "--ref", "cilium vxlan"}, files...), Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("compare exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"flannel vxlan", "kube-router vxlan", "ratios against cilium vxlan", "×0.33", "×1.00", "overlay · pod-pod cross node"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := Main([]string{"report", files[0]}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 || !strings.Contains(out.String(), "MEASURED") {
		t.Errorf("report FILE exit %d: %s\n%s", code, out.String(), errb.String())
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"schema":"other"}`), 0o644)
	errb.Reset()
	if code := Main([]string{"compare", files[0], bad}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}); code == 0 || !strings.Contains(errb.String(), "cnperf.bundle/v1") {
		t.Errorf("a file of another schema: exit %d: %s", code, errb.String())
	}
}

// TestCompareBundleFormats: -o json, yaml and csv of a bundle comparison.
func TestCompareBundleFormats(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, cni := range []string{"flannel", "calico"} {
		res := &evaluate.Result{Sheet: evaluate.Sheet{Lines: []evaluate.Line{{Question: evaluate.QMTU, Scope: suite.NodeNode,
			Verdict: evaluate.Holds, Reason: "r", Key: &evaluate.Figure{Name: "path_mtu", Value: float64(1450 + 50*i), Unit: "B"}}}},
			Reports: []suite.Report{{Suite: "pmtu", Environment: &hostinfo.Environment{CNI: cni, Backend: "vxlan"}}}}
		b, err := bundle.New(res, "test", time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, cni+".json")
		if err := writeFileAtomic(f, b.Write); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for format, want := range map[string]string{"json": `"ratio": 1.0344`, "yaml": "columns:", "csv": "mtu,node-node,holds 1450 B ×1.00,holds 1500 B ×1.03"} {
		var out, errb bytes.Buffer
		if code := Main(append([]string{"compare", "-o", format}, files...), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("-o %s: exit %d, lacks %q:\n%s%s", format, code, want, out.String(), errb.String())
		}
	}
}
