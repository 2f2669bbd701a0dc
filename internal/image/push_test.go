package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeBinary writes a minimal static ELF executable (a header alone) for
// machine m, with a marker after the header so each binary differs.
func fakeBinary(t *testing.T, m elf.Machine, marker string) string {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56, Shentsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	buf.WriteString(marker)
	p := filepath.Join(t.TempDir(), "cnperf-"+marker)
	if err := os.WriteFile(p, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// authRegistry is an in-process registry that answers only requests with
// basic credentials user:pass, and records whether any came without.
func authRegistry(t *testing.T) *httptest.Server {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "pass" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// dockerConfig points DOCKER_CONFIG at a config holding user:pass for host,
// so authn.DefaultKeychain finds them as it finds a user's.
func dockerConfig(t *testing.T, host string) {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("user:pass")) + `"}}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

func TestPushIndex(t *testing.T) {
	srv := authRegistry(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	dockerConfig(t, host)
	amd, arm := fakeBinary(t, elf.EM_X86_64, "amd64"), fakeBinary(t, elf.EM_AARCH64, "arm64")
	idx, err := Index([]Binary{{Arch: "amd64", Path: amd}, {Arch: "arm64", Path: arm}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cases := []struct {
		name, dst, repo string
		tag             string // the tag the push must set ("" none)
	}{
		{"tagged", host + "/team/cnperf:v1.2.3", host + "/team/cnperf", "v1.2.3"},
		{"by digest alone", host + "/other/cnperf", host + "/other/cnperf", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Push(ctx, tc.dst, idx, PushOptions{Insecure: true})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := idx.Digest()
			if got.DigestStr() != want.String() {
				t.Errorf("Push returned digest %s, the index is %s", got.DigestStr(), want)
			}
			if got.String() != tc.repo+"@"+want.String() {
				t.Errorf("reference %s is not REPO@sha256:... of %s", got, tc.dst)
			}
			ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
			readBack(t, got, ropts, map[string]string{"amd64": amd, "arm64": arm})
			tags, err := remote.List(got.Context(), ropts...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.tag == "" && len(tags) != 0 || tc.tag != "" && (len(tags) != 1 || tags[0] != tc.tag) {
				t.Errorf("tags %v, want %q", tags, tc.tag)
			}
		})
	}

	t.Run("without credentials", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		_, err := Push(ctx, host+"/team/cnperf:v1", idx, PushOptions{Insecure: true})
		if err == nil || !strings.Contains(err.Error(), "push to "+host+"/team/cnperf") {
			t.Fatalf("push without credentials: %v, want an error naming the repository", err)
		}
	})
}

// readBack pulls the index at ref and checks it holds one linux image per
// architecture, each with that architecture's binary as /cnperf.
func readBack(t *testing.T, ref name.Digest, ropts []remote.Option, bins map[string]string) {
	t.Helper()
	idx, err := remote.Index(ref, ropts...)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if len(im.Manifests) != len(bins) {
		t.Fatalf("index has %d manifests, want %d", len(im.Manifests), len(bins))
	}
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || bins[d.Platform.Architecture] == "" {
			t.Fatalf("manifest %s: platform %+v, want linux/{amd64,arm64}", d.Digest, d.Platform)
		}
		arch := d.Platform.Architecture
		img, err := remote.Image(ref.Context().Digest(d.Digest.String()), ropts...)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("manifest for %s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		wantBin, err := os.ReadFile(bins[arch])
		if err != nil {
			t.Fatal(err)
		}
		if got := fileData(t, img, "cnperf"); !bytes.Equal(got, wantBin) {
			t.Errorf("manifest for %s: /cnperf is %d bytes, not the %s binary (%d bytes)", arch, len(got), arch, len(wantBin))
		}
		delete(bins, arch)
	}
}

func fileData(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers %d: %v", len(ls), err)
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the layer", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == path {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func TestIndexRefuses(t *testing.T) {
	amd, arm := fakeBinary(t, elf.EM_X86_64, "amd64"), fakeBinary(t, elf.EM_AARCH64, "arm64")
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		bins []Binary
		want string
	}{
		{"none", nil, "no binaries"},
		{"wrong architecture", []Binary{{Arch: "amd64", Path: arm}}, "built for linux/arm64, not linux/amd64"},
		{"two of one architecture", []Binary{{Arch: "amd64", Path: amd}, {Arch: "amd64", Path: amd}}, "two binaries for linux/amd64"},
		{"not an executable", []Binary{{Arch: "amd64", Path: notELF}}, "not a Linux executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Index(tc.bins, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Index: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseBinaryAndDestination(t *testing.T) {
	if b, err := ParseBinary("linux/arm64=/x/cnperf"); err != nil || b != (Binary{Arch: "arm64", Path: "/x/cnperf"}) {
		t.Errorf("ParseBinary: %+v, %v", b, err)
	}
	for _, bad := range []string{"/x/cnperf", "darwin/arm64=/x", "linux/=/x", "linux/amd64="} {
		if _, err := ParseBinary(bad); err == nil {
			t.Errorf("ParseBinary(%q) accepted", bad)
		}
	}
	dests := []struct {
		in, want string
		ok       bool
	}{
		{"registry.example.com/team/cnperf:v1", "registry.example.com/team/cnperf:v1", true},
		{"registry.example.com/team/cnperf", "registry.example.com/team/cnperf@", true},
		{"registry.example.com/team/cnperf@sha256:" + strings.Repeat("a", 64), "", false},
		{"Registry.example.com/UPPER", "", false},
	}
	for _, d := range dests {
		ref, err := ParseDestination(d.in, PushOptions{})
		if (err == nil) != d.ok || err == nil && ref.String() != d.want {
			t.Errorf("ParseDestination(%q) = %v, %v; want %q ok=%v", d.in, ref, err, d.want, d.ok)
		}
	}
}

func TestForVersion(t *testing.T) {
	cases := []struct {
		version, want string
	}{
		{"v0.2.0", Repository + ":v0.2.0"},
		{"v1.0.0-rc.1", Repository + ":v1.0.0-rc.1"},
		{"(devel)", ""},
		{"dev", ""},
		{"v0.0.0-20260101120000-0123456789ab", ""},
		{"v0.2.1-0.20260101120000-0123456789ab", ""},
		{"v0.2.0-snapshot+abc123", ""},
		{"latest", ""},
	}
	for _, tc := range cases {
		got, err := ForVersion(tc.version)
		if got != tc.want || (tc.want == "") != errors.Is(err, ErrNoRelease) {
			t.Errorf("ForVersion(%q) = %q, %v; want %q", tc.version, got, err, tc.want)
		}
	}
}

func TestDockerConfigJSON(t *testing.T) {
	dockerConfig(t, "registry.example.com")
	ref, _ := name.ParseReference("registry.example.com/team/cnperf:v1")
	b, err := DockerConfigJSON(ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Auths) != 1 || cfg.Auths["registry.example.com"].Auth != base64.StdEncoding.EncodeToString([]byte("user:pass")) {
		t.Errorf("pull secret config %s: want only registry.example.com's user:pass", b)
	}
	other, _ := name.ParseReference("other.example.com/cnperf:v1")
	if _, err := DockerConfigJSON(other, nil); err == nil || !strings.Contains(err.Error(), "docker login other.example.com") {
		t.Errorf("no credentials: %v, want an error saying docker login", err)
	}
}
