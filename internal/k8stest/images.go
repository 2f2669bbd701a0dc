package k8stest

import (
	"context"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/image"
)

// CnperfImage is the tag of the image the harness runs cnperf from.
const CnperfImage = "localhost/cnperf:harness"

// pauseSource is the sandbox ("pause") program: PID 1 of every pod,
// waiting for a signal.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
`

// BuildImages builds cnperf (static) from repoRoot and a pause program,
// and writes their images to dir: the pause image and cnperf's image with
// the seed's tools (ping, iperf, iperf3, traceroute) and their libraries
// added from this machine, so the seed's task types run in the cluster,
// and, when this machine has Debian's PostgreSQL, PostgresImage. It
// returns the image files and the cnperf binary's path.
func BuildImages(ctx context.Context, repoRoot, dir string) (files []string, cnperf string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	cnperf = filepath.Join(dir, "cnperf")
	if err := goBuild(ctx, repoRoot, cnperf, "./cmd/cnperf"); err != nil {
		return nil, "", err
	}
	pauseDir := filepath.Join(dir, "pause-src")
	if err := os.MkdirAll(pauseDir, 0o755); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(pauseDir, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return nil, "", err
	}
	pause := filepath.Join(dir, "pause")
	if err := goBuild(ctx, pauseDir, pause, "./main.go"); err != nil {
		return nil, "", err
	}
	pauseTar := filepath.Join(dir, "pause.tar")
	if err := image.Write(pauseTar, image.Options{Binary: pause, Tag: sandboxImage, Format: image.FormatOCI}); err != nil {
		return nil, "", fmt.Errorf("pause image: %w", err)
	}
	extra, err := hostTools("ping", "iperf", "iperf3", "traceroute")
	if err != nil {
		return nil, "", err
	}
	cnperfTar := filepath.Join(dir, "cnperf.tar")
	if err := image.Write(cnperfTar, image.Options{Binary: cnperf, Tag: CnperfImage, Format: image.FormatDocker, Extra: extra}); err != nil {
		return nil, "", fmt.Errorf("cnperf image: %w", err)
	}
	files = []string{pauseTar, cnperfTar}
	// A throwaway PostgreSQL for the server replicas' check (replicas_test.go),
	// when this machine has Debian's PostgreSQL; that check skips otherwise.
	if pg, err := BuildPostgresImage(ctx, dir); err == nil {
		files = append(files, pg)
	} else if _, berr := postgresBinDir(); berr == nil {
		return nil, "", err
	}
	return files, cnperf, nil
}

func goBuild(ctx context.Context, dir, out, pkg string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// hostTools returns the named tools of this machine as image files at
// /usr/bin/NAME (a name given as an absolute path: at that path, and it
// may be a shared library), with their shared libraries, the dynamic
// loader and the loader's cache. A tool that is not installed is left out.
func hostTools(names ...string) ([]image.File, error) {
	var out []image.File
	seen := map[string]bool{}
	add := func(dst, src string, mode fs.FileMode) error {
		if seen[dst] {
			return nil
		}
		seen[dst] = true
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		out = append(out, image.File{Path: dst, Mode: mode, Data: data})
		return nil
	}
	var libs func(path string) error
	libs = func(path string) error {
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					return err
				}
				interp := strings.TrimRight(string(b), "\x00")
				real, err := filepath.EvalSymlinks(interp)
				if err != nil {
					return err
				}
				if err := add(interp, real, 0o755); err != nil {
					return err
				}
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, lib := range needed {
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, not found", path, lib)
			}
			real, err := filepath.EvalSymlinks(found)
			if err != nil {
				return err
			}
			dst := filepath.Join("/lib/x86_64-linux-gnu", lib)
			if seen[dst] {
				continue
			}
			if err := add(dst, real, 0o755); err != nil {
				return err
			}
			if err := libs(real); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range names {
		dst := "/usr/bin/" + n
		if filepath.IsAbs(n) { // a program or library at the same path in the image
			dst = n
		}
		p, err := exec.LookPath(n)
		if err != nil && filepath.IsAbs(n) {
			p = n // a library (not executable) given by its path
		} else if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		if err := add(dst, real, 0o755); err != nil {
			return nil, err
		}
		if err := libs(real); err != nil {
			return nil, err
		}
	}
	if len(out) > 0 {
		if err := add("/etc/ld.so.cache", "/etc/ld.so.cache", 0o644); err != nil {
			return nil, err
		}
	}
	return out, nil
}
