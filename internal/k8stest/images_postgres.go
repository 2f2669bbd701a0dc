package k8stest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnperf/cnperf/internal/image"
)

// PostgresImage is the tag of the throwaway PostgreSQL the harness runs in
// the cluster for the server replicas (overlays/postgres).
const PostgresImage = "localhost/cnperf-postgres:harness"

// postgresEntrySource is the PostgreSQL image's entrypoint: it makes a
// cluster in the (empty) data directory on first start, with the password
// from POSTGRES_PASSWORD for connections over TCP, and becomes postgres.
// %q is the binaries' directory.
const postgresEntrySource = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

const bin = %q

const data = "/var/lib/postgresql/data"

func main() {
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		pw := "/tmp/pwfile"
		if err := os.WriteFile(pw, []byte(os.Getenv("POSTGRES_PASSWORD")+"\n"), 0o600); err != nil {
			fail(err)
		}
		cmd := exec.Command(bin+"/initdb", "-D", data, "-U", "postgres", "--pwfile", pw,
			"--auth-local", "trust", "--auth-host", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("initdb: %%w", err))
		}
		os.Remove(pw)
		f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			fail(err)
		}
		if _, err := f.WriteString("host all all 0.0.0.0/0 scram-sha-256\n"); err != nil {
			fail(err)
		}
		f.Close()
	}
	err := syscall.Exec(bin+"/postgres", []string{bin + "/postgres", "-D", data, "-c", "listen_addresses=*",
		"-c", "unix_socket_directories=/tmp", "-c", "jit=off", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=100"}, os.Environ())
	fail(err)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cnperf-postgres:", err)
	os.Exit(1)
}
`

// postgresBinDir finds Debian's PostgreSQL binaries (the version
// scripts/install-test-deps.sh installs, 15, first).
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	dirs = append([]string{"/usr/lib/postgresql/15/bin"}, dirs...)
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "postgres")); err == nil && st.Mode().IsRegular() {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				return d, nil
			}
		}
	}
	return "", errors.New("no PostgreSQL binaries under /usr/lib/postgresql (scripts/install-test-deps.sh installs them)")
}

// BuildPostgresImage writes an image of this machine's PostgreSQL
// (Debian's binaries with their libraries, the server's own modules that
// initdb loads, its share directory, the time zones, and dash as /bin/sh
// for initdb's popen) to dir, made as
// cnperf's image is: no registry, no Docker. Its entrypoint makes a
// cluster on first start (postgresEntrySource); it must run as a user
// other than root (the image's nonroot, 65532) with a writable
// /var/lib/postgresql.
func BuildPostgresImage(ctx context.Context, dir string) (string, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return "", err
	}
	version := filepath.Base(filepath.Dir(bin))
	libDir := filepath.Join(filepath.Dir(bin), "lib")
	share := filepath.Join("/usr/share/postgresql", version)
	src := filepath.Join(dir, "pg-entry-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), fmt.Appendf(nil, postgresEntrySource, bin), 0o644); err != nil {
		return "", err
	}
	entry := filepath.Join(dir, "pg-entry")
	if err := goBuild(ctx, src, entry, "./main.go"); err != nil {
		return "", err
	}
	// The modules initdb and a cnperf server need (PL/pgSQL, the text
	// search dictionaries, the encoding conversions); not the JIT, which
	// would bring LLVM.
	// initdb runs postgres through popen(3), which needs /bin/sh (dash).
	progs := []string{filepath.Join(bin, "postgres"), filepath.Join(bin, "initdb"), "/bin/sh"}
	mods, err := os.ReadDir(libDir)
	if err != nil {
		return "", fmt.Errorf("postgres modules: %w", err)
	}
	for _, m := range mods {
		n := m.Name()
		if strings.HasSuffix(n, ".so") && (n == "plpgsql.so" || n == "dict_snowball.so" || strings.Contains(n, "_and_")) {
			progs = append(progs, filepath.Join(libDir, n))
		}
	}
	files, err := hostTools(progs...)
	if err != nil {
		return "", fmt.Errorf("postgres image: %w", err)
	}
	for _, tree := range []string{share, "/usr/share/zoneinfo"} {
		err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				return nil // a link to a directory (zoneinfo's posix/) or to nothing
			}
			data, err := os.ReadFile(p) // a link's target's data
			if err != nil {
				return err
			}
			files = append(files, image.File{Path: p, Mode: 0o644, Data: data})
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("postgres image: %w", err)
		}
	}
	out := filepath.Join(dir, "postgres.tar")
	if err := image.Write(out, image.Options{Binary: entry, Tag: PostgresImage, Format: image.FormatDocker, Extra: files}); err != nil {
		return "", fmt.Errorf("postgres image: %w", err)
	}
	return out, nil
}
