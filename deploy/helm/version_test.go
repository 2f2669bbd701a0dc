package helm

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cnperf/cnperf/internal/image"
	"github.com/cnperf/cnperf/internal/k8s"
)

// TestChartImagePinned: with default values the chart runs the image of
// its appVersion, a release tag, the one the kustomize base runs; never
// latest.
func TestChartImagePinned(t *testing.T) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"cnperf/Chart.yaml": &chart, "cnperf/values.yaml": &values} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	want, err := image.ForVersion(chart.AppVersion)
	if err != nil {
		t.Fatalf("Chart.yaml appVersion %q: %v", chart.AppVersion, err)
	}
	if values.Image.Repository != image.Repository || values.Image.Tag != "" {
		t.Errorf("values image %s:%s, want repository %s and an empty tag (the appVersion)", values.Image.Repository, values.Image.Tag, image.Repository)
	}
	objs, err := k8s.Render(k8s.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u, err := k8s.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != "Deployment" && u.GetKind() != "DaemonSet" {
			continue
		}
		cs := images(u.Object)
		for _, img := range cs {
			if img != want {
				t.Errorf("base %s %s runs %s; the chart's appVersion gives %s", u.GetKind(), u.GetName(), img, want)
			}
			if strings.HasSuffix(img, ":latest") {
				t.Errorf("base %s %s runs %s", u.GetKind(), u.GetName(), img)
			}
		}
	}
}

// images returns the images of a workload's containers.
func images(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	ps, _ := tmpl["spec"].(map[string]any)
	var out []string
	for _, key := range []string{"initContainers", "containers"} {
		cs, _ := ps[key].([]any)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				s, _ := m["image"].(string)
				out = append(out, s)
			}
		}
	}
	return out
}
