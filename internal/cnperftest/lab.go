package cnperftest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
)

// The suites' lab tests run `cnperf lab run SUITE --json` as a user does,
// on a fresh 2-node lab with one pod per node and one repetition (unless
// they give --nodes, --pods-per-node or --repeat), with short flows, and
// assert ratios and bounds with margins. They need root.
//
// One such run at a time on the machine: go test runs two packages at once
// on two cores, and two suites measuring beside each other take each
// other's CPU (a qos-priority run beside another lab run read a protected
// p99 of 1.8 ms; a contention run's floods filled 54 % of a bottleneck they
// fill alone). The runs take labRunLock, a file lock every test process
// shares, for the run itself.

// LabRun runs `cnperf lab run ARGS --json` on a lab named q + random and
// returns the rows; the lab must be gone afterwards.
func LabRun(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	rows, _ := LabRunIDs(t, args...)
	return rows
}

// LabRunIDs is LabRun that also returns the ids of the runs it made (give
// --db FILE to read them back afterwards).
func LabRunIDs(t *testing.T, args ...string) (rows []map[string]any, runIDs []string) {
	t.Helper()
	argv := append([]string{"run"}, args...)
	argv = append(argv, "--json")
	for flag, def := range map[string]string{"--nodes": "2", "--pods-per-node": "1", "--repeat": "1"} {
		if !slices.Contains(args, flag) {
			argv = append(argv, flag, def)
		}
	}
	stdout := LabCommand(t, 4*time.Minute, argv...)
	var out struct {
		Rows   []map[string]any `json:"rows"`
		RunIDs []string         `json:"run_ids"`
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("decode output: %v\n%s", err, stdout)
	}
	return out.Rows, out.RunIDs
}

// LabCommand runs `cnperf lab ARGS` (run SUITE, evaluate) on a lab named
// q + random, one lab command at a time on the machine, within timeout,
// and returns its standard output; it fails the test when the command
// fails or leaves the lab or a namespace behind.
func LabCommand(t *testing.T, timeout time.Duration, args ...string) []byte {
	t.Helper()
	nettest.Require(t)
	bin := Binary(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "q" + hex.EncodeToString(b[:])
	stateDir := t.TempDir()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := lab.Down(ctx, name, stateDir, nil); err == nil {
			t.Errorf("lab %s was left up by the run; removed it", name)
		}
	})
	unlock := lockLabRuns(t)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append([]string{"lab"}, args...)
	argv = append(argv, "--name", name, "--state-dir", stateDir, "--log-level", "warn", "--agent-log-level", "warn")
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("cnperf %s: %v\n%s", strings.Join(argv, " "), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("cnperf lab %s: %v", args[0], err)
	}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), lab.Prefix(name)) {
			t.Errorf("namespace left behind: %s", e.Name())
		}
	}
	return stdout.Bytes()
}

// Num reads a dotted key ("latency_ms.p99") of a row.
func Num(row map[string]any, key string) (float64, bool) {
	var cur any = row
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

// labRunLock is the file the suites' lab runs lock, one at a time across
// every test process on the machine.
var labRunLock = filepath.Join(os.TempDir(), "cnperf-labrun.lock")

// lockLabRuns waits for labRunLock until shortly before the test's
// deadline (failing the test if it never comes) and returns its release.
func lockLabRuns(t *testing.T) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(labRunLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("lab run lock: %v", err)
	}
	giveUp := time.Now().Add(20 * time.Minute)
	if d, ok := t.Deadline(); ok {
		giveUp = d.Add(-5 * time.Minute)
	}
	began := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(giveUp) {
			f.Close()
			t.Fatalf("lab run lock %s: %v after waiting %v", labRunLock, err, time.Since(began).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if waited := time.Since(began); waited > time.Second {
		t.Logf("waited %v for the other lab runs (%s)", waited.Round(time.Second), labRunLock)
	}
	return func() { f.Close() }
}
