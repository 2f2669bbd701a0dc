package labrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/scenario"
)

// cnperfBin is the cnperf binary the end-to-end tests run, built once.
var cnperfBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// TestMain removes the built binary after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if cnperfBin.dir != "" {
		_ = os.RemoveAll(cnperfBin.dir)
	}
	os.Exit(code)
}

// buildCnperf builds the cnperf binary once, into a directory every user
// can read, so the tests run the same program a user runs.
func buildCnperf(t *testing.T) string {
	t.Helper()
	b := &cnperfBin
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "cnperf-labrun-bin-")
		if b.err != nil {
			return
		}
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "cnperf")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, "./cmd/cnperf")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build, so the cache is warm
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// runJSON runs `cnperf lab run ARGS --json` and decodes its output.
func runJSON(t *testing.T, bin, name, stateDir string, args ...string) output {
	t.Helper()
	cleanupLab(t, name, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	argv := append([]string{"lab", "run"}, args...)
	argv = append(argv, "--json", "--name", name, "--state-dir", stateDir, "--log-level", "warn")
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("cnperf %s: %v\n%s", strings.Join(argv, " "), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("cnperf lab run: %v", err)
	}
	var out output
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode output: %v\n%s", err, stdout.String())
	}
	assertNoLab(t, name, stateDir)
	return out
}

// output is the JSON of a lab run, as a user's script reads it.
type output struct {
	RunID   string           `json:"run_id"`
	RunIDs  []string         `json:"run_ids"`
	Suite   string           `json:"suite"`
	Options json.RawMessage  `json:"options"`
	Rows    []map[string]any `json:"rows"`
}

// figure reads a dotted key ("throughput_bps.sender") of a row object.
func figure(obj map[string]any, key string) (float64, bool) {
	var cur any = obj
	for _, p := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		cur = m[p]
	}
	v, ok := cur.(float64)
	return v, ok
}

// positive are the figures every baseline row must have above zero, with
// the same keys under min and max.
var positive = []string{
	"throughput_bps.sender", "throughput_bps.receiver", "bytes.sender", "bytes.receiver",
	"cpu_pct.sender", "cpu_pct.receiver", "udp.throughput_bps.receiver", "rtt_ms.avg", "ping.rtt_ms.avg",
}

func checkRows(t *testing.T, out output, backends []string) {
	t.Helper()
	if out.RunID == "" || len(out.RunIDs) != len(backends) || out.RunIDs[0] != out.RunID {
		t.Errorf("run_id %q, run_ids %v: want one run per backend", out.RunID, out.RunIDs)
	}
	if len(out.Rows) != 3*len(backends) {
		t.Fatalf("%d rows, want %d", len(out.Rows), 3*len(backends))
	}
	for i, row := range out.Rows {
		wantConn, wantBackend := scenario.ConnectionOrder[i%3], backends[i/3]
		if row["connection"] != wantConn || row["backend"] != wantBackend {
			t.Errorf("row %d: %v on %v, want %s on %s", i, row["connection"], row["backend"], wantConn, wantBackend)
		}
		if row["src"] == "" || row["dst"] == "" || row["src"] == row["dst"] {
			t.Errorf("row %d: src %v dst %v", i, row["src"], row["dst"])
		}
		if errs, ok := row["errors"]; ok {
			t.Errorf("row %d (%s on %s) has failed steps: %v", i, wantConn, wantBackend, errs)
		}
		lo, _ := row["min"].(map[string]any)
		hi, _ := row["max"].(map[string]any)
		for _, k := range positive {
			v, ok := figure(row, k)
			vlo, ok1 := figure(lo, k)
			vhi, ok2 := figure(hi, k)
			if !ok || !ok1 || !ok2 || v <= 0 || vlo <= 0 || vlo > v || v > vhi {
				t.Errorf("row %d (%s on %s): %s median %v (min %v, max %v), want positive with min <= median <= max", i, wantConn, wantBackend, k, v, vlo, vhi)
			}
		}
		if loss, ok := figure(row, "loss_pct"); !ok || loss < 0 || loss > 100 {
			t.Errorf("row %d: loss_pct %v", i, loss)
		}
		if _, ok := row["overhead_pct"]; ok != (wantConn != scenario.NodeNode) {
			t.Errorf("row %d (%s): overhead_pct present %v", i, wantConn, ok)
		}
	}
}

// TestLabRunBaseline runs `cnperf lab run baseline --json` end to end: a
// lab, the real server and agents, the suite through the API.
func TestLabRunBaseline(t *testing.T) {
	nettest.Require(t)
	bin := buildCnperf(t)
	out := runJSON(t, bin, labName(t), t.TempDir(), "baseline", "--time", "1s", "--repeat", "2")
	if out.Suite != "baseline" {
		t.Errorf("suite %q", out.Suite)
	}
	checkRows(t, out, []string{"host-gw"})
	for _, row := range out.Rows {
		if n, _ := row["repetitions"].(float64); n != 2 {
			t.Errorf("%v: %v repetitions, want 2", row["connection"], row["repetitions"])
		}
	}
}

// TestLabRunCNICompare runs `cnperf lab run cni-compare --backends
// host-gw,vxlan --json` end to end: one lab per backend.
func TestLabRunCNICompare(t *testing.T) {
	nettest.Require(t)
	bin := buildCnperf(t)
	out := runJSON(t, bin, labName(t), t.TempDir(), "cni-compare", "--backends", "host-gw,vxlan", "--time", "1s", "--repeat", "1")
	checkRows(t, out, []string{"host-gw", "vxlan"})
}

// TestLabRunInterrupted interrupts a lab run while it measures and checks
// that the lab is removed all the same.
func TestLabRunInterrupted(t *testing.T) {
	nettest.Require(t)
	bin := buildCnperf(t)
	name, stateDir := labName(t), t.TempDir()
	cleanupLab(t, name, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lab", "run", "baseline", "--time", "10s", "--name", name, "--state-dir", stateDir, "--log-level", "warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the control plane is recorded: the suite is then running.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st, err := lab.Status(name, stateDir); err == nil && st.Cnperf != nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("lab run never started its control plane:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // into the first measurement
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("interrupted run exited with %v, want a non-zero code", err)
	}
	if !strings.Contains(stderr.String(), "context canceled") || !strings.Contains(stderr.String(), "down") {
		t.Errorf("stderr does not say the run was cancelled and the lab removed:\n%s", stderr.String())
	}
	assertNoLab(t, name, stateDir)
}

// TestLabRunWithoutRoot checks the one line a user without CAP_NET_ADMIN
// gets, and that nothing is made.
func TestLabRunWithoutRoot(t *testing.T) {
	nettest.Require(t) // root is needed to become nobody
	bin := buildCnperf(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lab", "run", "baseline", "--name", labName(t), "--state-dir", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want code 1", err)
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "CAP_NET_ADMIN") || !strings.Contains(msg, "sudo cnperf lab run baseline") {
		t.Errorf("stderr %q: want one line naming CAP_NET_ADMIN and how to run it", msg)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}
