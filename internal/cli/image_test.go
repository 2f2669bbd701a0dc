package cli

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/cnperf/cnperf/internal/image"
	"github.com/cnperf/cnperf/internal/k8s"
)

// elfBinary writes a header-only static ELF executable for machine m.
func elfBinary(t *testing.T, m elf.Machine) string {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), m.String())
	if err := os.WriteFile(p, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// testRegistry is an in-process registry without authentication; the
// Docker config is emptied so no user's credentials are read.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestImagePushCommand(t *testing.T) {
	host := testRegistry(t)
	amd, arm := elfBinary(t, elf.EM_X86_64), elfBinary(t, elf.EM_AARCH64)
	code, out, errs := cnperf(t, time.Minute, "image", "push", "--insecure-registry",
		"--binary", "linux/amd64="+amd, "--binary", "linux/arm64="+arm, host+"/cnperf:v9.9.9")
	if code != 0 {
		t.Fatalf("cnperf image push: exit %d: %s", code, errs)
	}
	ref, err := name.NewDigest(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q is not REPO@DIGEST: %v", out, err)
	}
	tag, err := name.ParseReference(host + "/cnperf:v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := remote.Head(tag)
	if err != nil {
		t.Fatal(err)
	}
	if tagged.Digest.String() != ref.DigestStr() || ref.Context().String() != host+"/cnperf" {
		t.Errorf("printed %s; the registry's v9.9.9 is %s", ref, tagged.Digest)
	}
	if !strings.Contains(errs, "linux/amd64, linux/arm64") {
		t.Errorf("stderr %q does not name both platforms", errs)
	}

	code, _, errs = cnperf(t, time.Minute, "image", "push", "--binary", "darwin/arm64="+arm, host+"/cnperf")
	if code == 0 || !strings.Contains(errs, "want linux/ARCH") {
		t.Errorf("push of a darwin binary: exit %d, stderr %q; want a refusal naming linux/ARCH", code, errs)
	}
}

// TestDeployPush: `cnperf k8s deploy --push` pushes, and the objects it
// applies run the pushed image by digest.
func TestDeployPush(t *testing.T) {
	host := testRegistry(t)
	d := deployImage{push: host + "/team/cnperf", pf: pushFlags{
		binaries: []string{"linux/amd64=" + elfBinary(t, elf.EM_X86_64), "linux/arm64=" + elfBinary(t, elf.EM_AARCH64)},
		insecure: true, timeout: time.Minute,
		exe: func() (string, error) { return "", errors.New("no running binary in this test") }}}
	var o k8s.DeployOptions
	if err := d.check(o); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := d.resolve(context.Background(), &o, &log); err != nil {
		t.Fatal(err)
	}
	pushed, err := name.NewDigest(o.Image)
	if err != nil {
		t.Fatalf("deploy image %s is not by digest: %v", o.Image, err)
	}
	idx, err := remote.Index(pushed)
	if err != nil {
		t.Fatalf("deploy image %s: %v", o.Image, err)
	}
	dg, _ := idx.Digest()
	if want := host + "/team/cnperf@" + dg.String(); o.Image != want {
		t.Fatalf("deploy image %s, want %s", o.Image, want)
	}
	objs, err := k8s.Render(o)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, obj := range objs {
		ps := k8s.PodSpecOf(obj)
		if ps == nil {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
			n++
			if c.Image != o.Image {
				t.Errorf("%T container %s: image %s, want %s", obj, c.Name, c.Image, o.Image)
			}
		}
	}
	if n == 0 {
		t.Fatal("no containers rendered")
	}
}

func TestDeployDefaultImage(t *testing.T) {
	cases := []struct {
		name    string
		d       deployImage
		o       k8s.DeployOptions
		want    string // the image deployed; "" an error
		wantErr string
	}{
		{"release", deployImage{version: "v1.2.3"}, k8s.DeployOptions{}, image.Repository + ":v1.2.3", ""},
		{"devel build", deployImage{version: "(devel)"}, k8s.DeployOptions{}, "", "--push REGISTRY/REPO"},
		{"devel build, --image", deployImage{version: "(devel)"}, k8s.DeployOptions{Image: "localhost/cnperf:dev"}, "localhost/cnperf:dev", ""},
		{"--push and --image", deployImage{push: "registry.example.com/cnperf"}, k8s.DeployOptions{Image: "x/y:z"}, "", "give one"},
		{"--create-image-pull-secret alone", deployImage{version: "v1.2.3", createSecret: true}, k8s.DeployOptions{}, "", "--image-pull-secret NAME"},
		{"--create-image-pull-secret, no credentials", deployImage{version: "v1.2.3", createSecret: true}, k8s.DeployOptions{ImagePullSecret: "regcred"}, "", "docker login ghcr.io"},
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := tc.d.check(o)
			if err == nil {
				err = tc.d.resolve(context.Background(), &o, io.Discard)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v (image %q), want an error containing %q", err, o.Image, tc.wantErr)
				}
				return
			}
			if err != nil || o.Image != tc.want {
				t.Fatalf("image %q, %v; want %q", o.Image, err, tc.want)
			}
		})
	}
}
