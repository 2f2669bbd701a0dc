package image

import (
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository is where a release publishes cnperf's image (.goreleaser.yaml),
// one tag per release, named like the release's tag.
const Repository = "ghcr.io/cnperf/cnperf"

// ErrNoRelease means a binary has no release of its own, hence no
// published image.
var ErrNoRelease = errors.New("a development build has no published image")

// pseudoVersion matches Go pseudo-versions (v0.0.0-20260101120000-0123456789ab),
// which name a commit, not a release.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)

// release matches a release tag: vMAJOR.MINOR.PATCH with an optional
// pre-release (v1.2.0-rc.1); a snapshot's version has build metadata
// (+...) and no image.
var release = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// ForVersion returns the image a binary of the given version deploys by
// default: that release's own tag in Repository, never "latest".
func ForVersion(version string) (string, error) {
	if !release.MatchString(version) || pseudoVersion.MatchString(version) {
		return "", fmt.Errorf("%w (this cnperf is version %q)", ErrNoRelease, version)
	}
	return Repository + ":" + version, nil
}

// Binary is a static Linux executable for one platform of an image index.
type Binary struct {
	Arch string // GOARCH: amd64, arm64, ...
	Path string
}

// ParseBinary reads "linux/ARCH=PATH" (the --binary flag of `cnperf image push`).
func ParseBinary(s string) (Binary, error) {
	plat, path, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return Binary{}, fmt.Errorf("binary %q: want linux/ARCH=PATH, e.g. linux/arm64=dist/cnperf-linux-arm64", s)
	}
	os, arch, ok := strings.Cut(plat, "/")
	if !ok || os != "linux" || arch == "" {
		return Binary{}, fmt.Errorf("binary %q: platform %q: want linux/ARCH (images run on Linux nodes)", s, plat)
	}
	return Binary{Arch: arch, Path: path}, nil
}

// elfArch maps ELF machines to GOARCH.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_386:     "386",
	elf.EM_ARM:     "arm",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// ArchOf returns the GOARCH a Linux executable was built for.
func ArchOf(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("binary %s: not a Linux executable: %w", path, err)
	}
	defer f.Close()
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("binary %s: machine %v: not an architecture cnperf images carry", path, f.Machine)
	}
	return arch, nil
}

// Index builds an OCI image index with one image per binary (each as
// Build makes it, in OCI form), for the platform linux/ARCH. Each binary
// must be static and built for the architecture it is given for; two
// binaries of one architecture are an error.
func Index(bins []Binary, o Options) (v1.ImageIndex, error) {
	if len(bins) == 0 {
		return nil, errors.New("image index: no binaries")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for _, b := range bins {
		if prev, dup := seen[b.Arch]; dup {
			return nil, fmt.Errorf("two binaries for linux/%s: %s and %s", b.Arch, prev, b.Path)
		}
		seen[b.Arch] = b.Path
		got, err := ArchOf(b.Path)
		if err != nil {
			return nil, err
		}
		if got != b.Arch {
			return nil, fmt.Errorf("binary %s is built for linux/%s, not linux/%s", b.Path, got, b.Arch)
		}
		bo := o
		bo.Binary, bo.Arch, bo.Format = b.Path, b.Arch, FormatOCI
		img, _, err := Build(bo)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: b.Arch}}})
	}
	return idx, nil
}

// PushOptions say how to reach the registry.
type PushOptions struct {
	// Insecure: the registry speaks plain HTTP (or HTTPS with a
	// certificate the system does not trust), e.g. a registry on a lab
	// network. Registries on localhost are reached over HTTP anyway.
	Insecure bool
	// Keychain finds credentials for the registry; nil means
	// authn.DefaultKeychain: the Docker config ($DOCKER_CONFIG or
	// ~/.docker/config.json) with its credential helpers.
	Keychain authn.Keychain
}

// ParseDestination reads REGISTRY/REPO[:TAG] for Push.
func ParseDestination(dst string, po PushOptions) (name.Reference, error) {
	var opts []name.Option
	if po.Insecure {
		opts = append(opts, name.Insecure)
	}
	if strings.Contains(dst, "@") {
		return nil, fmt.Errorf("push destination %q: name a repository and optionally a tag, not a digest (the digest is what the push returns)", dst)
	}
	ref, err := name.ParseReference(dst, append(opts, name.StrictValidation)...)
	if err != nil {
		// Without a tag StrictValidation refuses; accept REGISTRY/REPO.
		repo, rerr := name.NewRepository(dst, append(opts, name.StrictValidation)...)
		if rerr != nil {
			return nil, fmt.Errorf("push destination %q: %w", dst, err)
		}
		return repo.Digest(""), nil
	}
	return ref, nil
}

// Push writes idx to the repository of dst (REGISTRY/REPO[:TAG]), tagged
// when dst has a tag, and returns the reference by digest
// (REGISTRY/REPO@sha256:...) that pulls exactly what was pushed. ctx bounds
// the whole push.
func Push(ctx context.Context, dst string, idx v1.ImageIndex, po PushOptions) (name.Digest, error) {
	ref, err := ParseDestination(dst, po)
	if err != nil {
		return name.Digest{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("image index digest: %w", err)
	}
	byDigest := ref.Context().Digest(d.String())
	target := ref
	if _, tagged := ref.(name.Tag); !tagged {
		target = byDigest
	}
	kc := po.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	if err := remote.WriteIndex(target, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)); err != nil {
		return name.Digest{}, fmt.Errorf("push to %s: %w", ref.Context(), err)
	}
	return byDigest, nil
}

// DockerConfigJSON returns a Docker config (the .dockerconfigjson of a
// Kubernetes image pull Secret) holding only the credentials the keychain
// gives for ref's registry. A registry the keychain has nothing for is an
// error: a Secret without credentials would pull nothing.
func DockerConfigJSON(ref name.Reference, kc authn.Keychain) ([]byte, error) {
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	reg := ref.Context().Registry
	a, err := kc.Resolve(reg)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", reg.Name(), err)
	}
	cfg, err := a.Authorization()
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", reg.Name(), err)
	}
	type entry struct {
		Auth          string `json:"auth,omitempty"`
		IdentityToken string `json:"identitytoken,omitempty"`
		RegistryToken string `json:"registrytoken,omitempty"`
	}
	var e entry
	switch {
	case cfg.Username != "" || cfg.Password != "":
		e.Auth = base64.StdEncoding.EncodeToString([]byte(cfg.Username + ":" + cfg.Password))
	case cfg.Auth != "":
		e.Auth = cfg.Auth
	case cfg.IdentityToken != "":
		e.IdentityToken = cfg.IdentityToken
	case cfg.RegistryToken != "":
		e.RegistryToken = cfg.RegistryToken
	default:
		return nil, fmt.Errorf("credentials for %s: the Docker config and its credential helpers have none (docker login %s first)", reg.Name(), reg.Name())
	}
	key := reg.Name()
	if key == name.DefaultRegistry {
		key = "https://index.docker.io/v1/" // the key kubelet looks up for Docker Hub
	}
	return json.Marshal(map[string]map[string]entry{"auths": {key: e}})
}
