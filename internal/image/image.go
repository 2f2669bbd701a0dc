// Package image writes a container image of a static binary (cnperf by
// default) as a docker-save or OCI-layout tarball, offline: no Docker, no
// registry, nothing downloaded. containerd imports either form with
// `ctr -n k8s.io images import FILE`, so air-gapped clusters and the
// Kubernetes test harness run cnperf from such a file.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Formats of the written file.
const (
	FormatDocker = "docker" // `docker save` layout: manifest.json, config, layer tarballs
	FormatOCI    = "oci"    // an OCI image layout (index.json, blobs/) in a tar
)

// DefaultTag names the image when none is given.
const DefaultTag = "localhost/cnperf:dev"

// File is an extra file put into the image.
type File struct {
	Path string // absolute path inside the image
	Mode fs.FileMode
	Data []byte
	// Link, when set, makes Path a symbolic link to Link.
	Link string
}

// Options say what to build.
type Options struct {
	Binary string // the static executable; it becomes /cnperf, the entrypoint
	Tag    string // e.g. localhost/cnperf:dev
	Format string // FormatDocker or FormatOCI
	// Extra files (e.g. tools and their libraries for tests).
	Extra []File
	// Arch of the image; the running program's by default.
	Arch string
}

// epoch makes the image reproducible: the same binary gives the same digest.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image described by o.
func Build(o Options) (v1.Image, name.Reference, error) {
	if o.Tag == "" {
		o.Tag = DefaultTag
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	ref, err := name.NewTag(o.Tag, name.StrictValidation)
	if err != nil {
		return nil, nil, fmt.Errorf("tag %q: %w", o.Tag, err)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, nil, fmt.Errorf("read binary: %w", err)
	}
	if err := CheckStatic(o.Binary); err != nil {
		return nil, nil, err
	}
	files := append([]File{
		{Path: "/cnperf", Mode: 0o755, Data: bin},
		// Writable scratch space for tools that need one; the manifests
		// mount the root read-only and add volumes where needed.
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/cnperf\nnonroot:x:65532:65532:nonroot:/:/cnperf\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}, o.Extra...)
	layerTar, err := tarFiles(files)
	if err != nil {
		return nil, nil, err
	}
	oci := o.Format == FormatOCI
	layerType := types.DockerLayer
	base := empty.Image
	if oci {
		layerType = types.OCILayer
		base = mutate.MediaType(base, types.OCIManifestSchema1)
		base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(layerType))
	if err != nil {
		return nil, nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "cnperf image build", Comment: "the static cnperf binary"}})
	if err != nil {
		return nil, nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/cnperf"}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "cnperf",
		"org.opencontainers.image.description": "network performance and QoS testing for container networks"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, nil, fmt.Errorf("set config: %w", err)
	}
	return img, ref, nil
}

// Write builds the image and writes it to path in o.Format. The file
// appears complete or not at all.
func Write(path string, o Options) error {
	switch o.Format {
	case "":
		o.Format = FormatDocker
	case FormatDocker, FormatOCI:
	default:
		return fmt.Errorf("format %q: must be %s or %s", o.Format, FormatDocker, FormatOCI)
	}
	img, ref, err := Build(o)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".cnperf-image-*")
	if err != nil {
		return fmt.Errorf("output %s: %w", path, err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	switch o.Format {
	case FormatDocker:
		err = tarball.Write(ref, img, tmp)
	case FormatOCI:
		err = writeOCI(tmp, ref, img)
	}
	if err != nil {
		return fmt.Errorf("write %s image: %w", o.Format, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	return nil
}

// writeOCI writes an OCI image layout holding img, named ref, as a tar.
func writeOCI(w io.Writer, ref name.Reference, img v1.Image) error {
	dir, err := os.MkdirTemp("", "cnperf-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.Name(), // containerd's import reads this
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return err
	}
	return tarDir(w, dir)
}

func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// tarFiles makes a layer: the files with their parent directories.
func tarFiles(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("image file %q: path must be absolute", f.Path)
		}
		clean := strings.TrimPrefix(path.Clean(f.Path), "/")
		for d := path.Dir(clean); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, f := range sorted {
		clean := strings.TrimPrefix(path.Clean(f.Path), "/")
		if seen[clean] {
			return nil, fmt.Errorf("image file %q given twice", f.Path)
		}
		seen[clean] = true
		hdr := &tar.Header{Name: clean, Mode: int64(f.Mode.Perm()), ModTime: epoch}
		if f.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch {
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.Mode.IsDir():
			if dirs[clean] {
				continue
			}
			hdr.Typeflag, hdr.Name = tar.TypeDir, clean+"/"
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrNotStatic means the binary needs a dynamic loader the image lacks.
var ErrNotStatic = errors.New("binary is dynamically linked")

// CheckStatic makes sure the binary runs in an image with nothing else: a
// Linux ELF executable without an interpreter (built with CGO_ENABLED=0).
func CheckStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("binary %s: not a Linux executable: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: %s needs a dynamic loader the image does not have; build it with CGO_ENABLED=0 (make build)", ErrNotStatic, p)
		}
	}
	return nil
}
