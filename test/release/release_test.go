// Package release tests the release a tag produces (.goreleaser.yaml):
// goreleaser runs on a copy of the tree tagged v1.2.3, publishing nothing,
// and the test checks the archives, checksums, krew manifest and binaries.
// make test-release (part of make test) builds goreleaser first
// (build-goreleaser.sh) and passes it in CNPERF_GORELEASER; without it the
// test skips.
package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cnperf/cnperf/internal/image"
)

const tag = "v1.2.3"

// platforms are the release's targets, each an archive.
var platforms = []string{"linux_amd64", "linux_arm64"}

// krewManifest is the part of a krew plugin manifest the test reads.
type krewManifest struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			URI      string `json:"uri"`
			Sha256   string `json:"sha256"`
			Bin      string `json:"bin"`
			Selector struct {
				MatchLabels struct {
					OS   string `json:"os"`
					Arch string `json:"arch"`
				} `json:"matchLabels"`
			} `json:"selector"`
		} `json:"platforms"`
	} `json:"spec"`
}

func TestRelease(t *testing.T) {
	gr := os.Getenv("CNPERF_GORELEASER")
	if gr == "" {
		t.Skip("CNPERF_GORELEASER not set: make test-release builds goreleaser (test/release/build-goreleaser.sh) and runs this test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	dir := taggedCopy(ctx, t)
	cmd := exec.CommandContext(ctx, gr, "release", "--clean", "--skip=publish,announce,validate")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goreleaser release: %v\n%s", err, out)
	}
	dist := filepath.Join(dir, "dist")

	sums := readChecksums(t, filepath.Join(dist, "checksums.txt"))
	var want []string
	for _, p := range platforms {
		want = append(want, "cnperf_"+tag+"_"+p+".tar.gz")
	}
	if got := sortedKeys(sums); !slices.Equal(got, want) {
		t.Fatalf("checksums.txt lists %v, want the archives %v", got, want)
	}
	bins := map[string]string{} // platform -> extracted binary
	for i, name := range want {
		p := filepath.Join(dist, name)
		if got := sha256File(t, p); got != sums[name] {
			t.Errorf("%s: sha256 %s, checksums.txt says %s", name, got, sums[name])
		}
		bins[platforms[i]] = extract(t, p, t.TempDir())
	}

	var km krewManifest
	b, err := os.ReadFile(filepath.Join(dist, "krew", "cnperf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &km); err != nil {
		t.Fatalf("krew manifest: %v", err)
	}
	if km.Kind != "Plugin" || km.Metadata.Name != "cnperf" || km.Spec.Version != tag {
		t.Errorf("krew manifest: kind %q name %q version %q, want Plugin cnperf %s", km.Kind, km.Metadata.Name, km.Spec.Version, tag)
	}
	seen := map[string]bool{}
	for _, p := range km.Spec.Platforms {
		plat := p.Selector.MatchLabels.OS + "_" + p.Selector.MatchLabels.Arch
		name := "cnperf_" + tag + "_" + plat + ".tar.gz"
		if sums[name] == "" || seen[plat] {
			t.Errorf("krew platform %s: no archive %s in the release (or listed twice)", plat, name)
			continue
		}
		seen[plat] = true
		if wantURI := "https://github.com/cnperf/cnperf/releases/download/" + tag + "/" + name; p.URI != wantURI {
			t.Errorf("krew %s: uri %s, want %s", plat, p.URI, wantURI)
		}
		if p.Sha256 != sums[name] {
			t.Errorf("krew %s: sha256 %s, the archive's is %s", plat, p.Sha256, sums[name])
		}
		if p.Bin != "cnperf" {
			t.Errorf("krew %s: bin %q, want cnperf", plat, p.Bin)
		}
	}
	if len(seen) != len(platforms) {
		t.Errorf("krew manifest covers %v, want all of %v", sortedKeys(seen), platforms)
	}

	// The binaries: stripped, the Linux ones static and of their
	// architecture (what the image index needs), the native one says the tag.
	for plat, bin := range bins {
		if strings.HasPrefix(plat, "linux_") {
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			if f.Section(".symtab") != nil {
				t.Errorf("%s binary has a symbol table: not stripped", plat)
			}
			f.Close()
		}
	}
	if _, err := image.Index([]image.Binary{{Arch: "amd64", Path: bins["linux_amd64"]}, {Arch: "arm64", Path: bins["linux_arm64"]}}, image.Options{}); err != nil {
		t.Errorf("the linux binaries do not make the image index: %v", err)
	}
	if native, ok := bins[runtime.GOOS+"_"+runtime.GOARCH]; ok {
		out, err := exec.CommandContext(ctx, native, "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "cnperf "+tag+", commit ") {
			t.Errorf("cnperf version: %q, %v; want it to print %s", out, err, tag)
		}
	}
}

// taggedCopy copies the tree's tracked files as they are now (uncommitted
// edits included) into a new git repository whose one commit is tagged
// with tag: what goreleaser sees on a release.
func taggedCopy(ctx context.Context, t *testing.T) string {
	t.Helper()
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): the release is built from one", err)
	}
	src := strings.TrimSpace(string(top))
	snap, err := exec.CommandContext(ctx, "git", "-C", src, "stash", "create").Output()
	if err != nil {
		t.Fatalf("git stash create: %v", err)
	}
	rev := strings.TrimSpace(string(snap))
	if rev == "" {
		rev = "HEAD"
	}
	dir := t.TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", src, "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive: %v", err)
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x: %v", err)
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=cnperf test", "-c", "user.email=test@cnperf.invalid", "commit", "-q", "-m", "release test"},
		{"tag", tag},
		// goreleaser reads the project's remote (nothing is fetched).
		{"remote", "add", "origin", "https://github.com/cnperf/cnperf.git"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// readChecksums reads goreleaser's checksums.txt ("SHA256  NAME" lines).
func readChecksums(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || len(fields[0]) != 64 {
			t.Fatalf("checksums.txt: line %q", sc.Text())
		}
		out[fields[1]] = fields[0]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// extract checks that the archive holds cnperf, LICENSE and README.md and
// writes cnperf into dir; it returns its path.
func extract(t *testing.T, archive, dir string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(zr)
	found := map[string]bool{}
	bin := filepath.Join(dir, "cnperf")
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		found[h.Name] = true
		if h.Name == "cnperf" {
			out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{"cnperf", "LICENSE", "README.md"} {
		if !found[want] {
			t.Errorf("%s: no %s in it (has %v)", filepath.Base(archive), want, sortedKeys(found))
		}
	}
	return bin
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
