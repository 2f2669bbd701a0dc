package cnperftest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
)

// The suites' lab tests run `cnperf lab run SUITE --json` as a user does,
// on a fresh 2-node lab with one pod per node and one repetition (unless
// they give --nodes, --pods-per-node or --repeat), with short flows, and
// assert ratios and bounds with margins. They need root.

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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	argv := append([]string{"lab", "run"}, args...)
	argv = append(argv, "--json", "--name", name, "--state-dir", stateDir,
		"--log-level", "warn", "--agent-log-level", "warn")
	for flag, def := range map[string]string{"--nodes": "2", "--pods-per-node": "1", "--repeat": "1"} {
		if !slices.Contains(args, flag) {
			argv = append(argv, flag, def)
		}
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("cnperf %s: %v\n%s", strings.Join(argv, " "), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("cnperf lab run: %v", err)
	}
	var out struct {
		Rows   []map[string]any `json:"rows"`
		RunIDs []string         `json:"run_ids"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("decode output: %v\n%s", err, stdout.String())
	}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), lab.Prefix(name)) {
			t.Errorf("namespace left behind: %s", e.Name())
		}
	}
	return out.Rows, out.RunIDs
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
