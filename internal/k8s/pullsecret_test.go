package k8s

import (
	"bytes"
	"context"
	"io/fs"
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	manifests "github.com/cnperf/cnperf/deploy/kubernetes"
	"github.com/cnperf/cnperf/internal/image"
)

// TestRenderImageByDigest: what `cnperf k8s deploy --push` applies pulls
// the pushed image by digest, with the pull Secret on every workload and
// on every ServiceAccount (which the test pods use).
func TestRenderImageByDigest(t *testing.T) {
	ref := "registry.example.com/team/cnperf@sha256:" + strings.Repeat("ab", 32)
	objs := render(t, DeployOptions{Image: ref, ImagePullSecret: "regcred"})
	var workloads, accounts int
	for _, o := range objs {
		var ps *corev1.PodSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps = &x.Spec.Template.Spec
		case *appsv1.DaemonSet:
			ps = &x.Spec.Template.Spec
		case *corev1.ServiceAccount:
			accounts++
			if len(x.ImagePullSecrets) != 1 || x.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("serviceaccount %s: image pull secrets %v, want regcred", x.Name, x.ImagePullSecrets)
			}
			continue
		default:
			continue
		}
		workloads++
		if len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("%T: image pull secrets %v, want regcred", o, ps.ImagePullSecrets)
		}
		for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
			if c.Image != ref {
				t.Errorf("%T container %s: image %s, want %s", o, c.Name, c.Image, ref)
			}
		}
	}
	if workloads == 0 || accounts == 0 {
		t.Fatalf("rendered %d workloads and %d service accounts", workloads, accounts)
	}
}

func TestEnsurePullSecret(t *testing.T) {
	cfg := []byte(`{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}`)
	ctx := context.Background()
	t.Run("created, then replaced", func(t *testing.T) {
		c := fakeClient()
		for i, verb := range []string{"created", "replaced"} {
			var log bytes.Buffer
			data := append([]byte(nil), cfg...)
			data[len(data)-3] += byte(i) // the second deploy carries new credentials
			if err := c.ensurePullSecret(ctx, DeployOptions{ImagePullSecret: "regcred", PullSecretConfig: data}, &log); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), "secret/regcred "+verb) {
				t.Errorf("log %q, want secret/regcred %s", log.String(), verb)
			}
			s, err := c.Kube.CoreV1().Secrets(Namespace).Get(ctx, "regcred", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Type != corev1.SecretTypeDockerConfigJson || !bytes.Equal(s.Data[corev1.DockerConfigJsonKey], data) {
				t.Errorf("secret %s %q, want %s with the credentials", s.Type, s.Data[corev1.DockerConfigJsonKey], corev1.SecretTypeDockerConfigJson)
			}
		}
	})
	t.Run("existing one referenced", func(t *testing.T) {
		c := fakeClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: Namespace},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}})
		if err := c.ensurePullSecret(ctx, DeployOptions{ImagePullSecret: "regcred"}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing one referenced", func(t *testing.T) {
		err := fakeClient().ensurePullSecret(ctx, DeployOptions{ImagePullSecret: "regcred"}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "not in namespace cnperf") {
			t.Fatalf("missing secret: %v, want an error saying it is not in the namespace", err)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		c := fakeClient(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: Namespace}, Type: corev1.SecretTypeOpaque})
		err := c.ensurePullSecret(ctx, DeployOptions{ImagePullSecret: "regcred"}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "type Opaque") {
			t.Fatalf("opaque secret: %v, want an error naming its type", err)
		}
	})
}

// TestBaseImagePinned: the base runs this tree's release image by its tag,
// the same one kustomization.yaml names, never latest.
func TestBaseImagePinned(t *testing.T) {
	raw, err := fs.ReadFile(manifests.Files, path.Join(manifests.Base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || k.Images[0].Name != image.Repository {
		t.Fatalf("kustomization images %+v, want one entry for %s", k.Images, image.Repository)
	}
	want, err := image.ForVersion(k.Images[0].NewTag)
	if err != nil {
		t.Fatalf("kustomization newTag %q: %v", k.Images[0].NewTag, err)
	}
	var n int
	for _, o := range render(t, DeployOptions{}) {
		ps := PodSpecOf(o)
		if ps == nil {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
			n++
			if c.Image != want {
				t.Errorf("%T container %s: image %s, want %s", o, c.Name, c.Image, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("no containers in the base")
	}
}
