package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// staticBinary builds a tiny static program to put in images.
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func filesOf(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = h
	}
}

func checkImage(t *testing.T, img v1.Image, bin string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/cnperf" || cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("config: entrypoint %v os %s arch %s", cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	files := filesOf(t, img)
	h, ok := files["cnperf"]
	if !ok {
		t.Fatalf("no /cnperf in the image; files: %v", files)
	}
	st, _ := os.Stat(bin)
	if h.Size != st.Size() || h.Mode&0o777 != 0o755 {
		t.Errorf("/cnperf size %d mode %o; want %d 755", h.Size, h.Mode, st.Size())
	}
	if h, ok := files["tmp"]; !ok || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp missing or not sticky and world-writable")
	}
}

func TestWriteDockerAndOCI(t *testing.T) {
	bin := staticBinary(t)
	dir := t.TempDir()

	docker := filepath.Join(dir, "cnperf-docker.tar")
	if err := Write(docker, Options{Binary: bin, Tag: "localhost/cnperf:test", Format: FormatDocker}); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(docker) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "localhost/cnperf:test" {
		t.Fatalf("docker manifest.json: %+v", m)
	}
	img, err := tarball.ImageFromPath(docker, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, img, bin)

	oci := filepath.Join(dir, "cnperf-oci.tar")
	if err := Write(oci, Options{Binary: bin, Tag: "localhost/cnperf:test", Format: FormatOCI}); err != nil {
		t.Fatal(err)
	}
	unpacked := filepath.Join(dir, "oci")
	untar(t, oci, unpacked)
	idx, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "localhost/cnperf:test" {
		t.Fatalf("index.json: %+v", im.Manifests)
	}
	oimg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	mt, _ := oimg.MediaType()
	if !strings.Contains(string(mt), "oci") {
		t.Errorf("OCI image has media type %s", mt)
	}
	checkImage(t, oimg, bin)

	// Reproducible: the same binary gives the same image digest.
	again := filepath.Join(dir, "again.tar")
	if err := Write(again, Options{Binary: bin, Tag: "localhost/cnperf:test", Format: FormatDocker}); err != nil {
		t.Fatal(err)
	}
	img2, err := tarball.ImageFromPath(again, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("digests differ: %s vs %s", d1, d2)
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		data, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	bin := staticBinary(t)
	dir := t.TempDir()
	dynamic, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls to use as a dynamic binary")
	}
	cases := []struct {
		name string
		out  string
		o    Options
		want string
	}{
		{"dynamic binary", filepath.Join(dir, "a.tar"), Options{Binary: dynamic}, "CGO_ENABLED=0"},
		{"not an executable", filepath.Join(dir, "b.tar"), Options{Binary: "/etc/hostname"}, "not a Linux executable"},
		{"missing binary", filepath.Join(dir, "c.tar"), Options{Binary: filepath.Join(dir, "nope")}, "read binary"},
		{"bad format", filepath.Join(dir, "d.tar"), Options{Binary: bin, Format: "zip"}, "format \"zip\""},
		{"bad tag", filepath.Join(dir, "e.tar"), Options{Binary: bin, Tag: "UPPER/Case:x"}, "tag"},
		{"no such directory", filepath.Join(dir, "no", "f.tar"), Options{Binary: bin}, "output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(tc.out, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one saying %q", err, tc.want)
			}
			if _, serr := os.Stat(tc.out); serr == nil {
				t.Fatal("a file was left behind")
			}
		})
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".cnperf-image-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
