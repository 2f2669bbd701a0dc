// Package cnperftest builds the cnperf binary for end-to-end tests, once
// per test process, so they run the same program a user runs. The binary
// is static (CGO_ENABLED=0, as `make build`, so the build cache is shared)
// and lies in a directory every user can read, so tests can also run it as
// an unprivileged user or inside namespaces. A test package's TestMain
// calls Main, which removes the binary after the tests.
package cnperftest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds the one build (a cold build cache on a busy machine
// takes minutes).
const buildTimeout = 5 * time.Minute

var built struct {
	once sync.Once
	dir  string // the temporary directory holding the binary
	path string
	err  error
}

// Binary returns the path of the cnperf binary, building it on first use.
// A failed build fails t with the compiler's output.
func Binary(t testing.TB) string {
	t.Helper()
	b := &built
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "cnperf-test-bin-"); b.err != nil {
			return
		}
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "cnperf")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, "github.com/cnperf/cnperf/cmd/cnperf")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build cnperf: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes the binary built by Binary, if any.
func Cleanup() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// Main runs the package's tests, removes the binary built by Binary and
// exits with the tests' code: a test package's whole TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}
