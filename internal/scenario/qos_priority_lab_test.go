package scenario_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	cnperftest.Cleanup()
	os.Exit(code)
}

// The lab tests run `cnperf lab run SUITE --json` as a user does, on a
// fresh 2-node lab with one pod per node, with short flows, and assert
// ratios and bounds with margins. They need root.

// labRun runs `cnperf lab run ARGS --json` on a lab named q + random and
// returns the rows; the lab must be gone afterwards.
func labRun(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	nettest.Require(t)
	bin := cnperftest.Binary(t)
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
	argv = append(argv, "--json", "--name", name, "--state-dir", stateDir, "--nodes", "2", "--pods-per-node", "1",
		"--repeat", "1", "--log-level", "warn", "--agent-log-level", "warn")
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
		Rows []map[string]any `json:"rows"`
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
	return out.Rows
}

// num reads a dotted key ("latency_ms.p99") of a row.
func num(row map[string]any, key string) (float64, bool) {
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

// TestQoSPriorityLab: on a 1 Gbit/s bottleneck with a 2 Gbit/s flood, the
// HTB priority tree cuts the EF flow's p99 one-way latency at least 10×
// against the FIFO; pfifo_fast on the pod's veth at line rate shows no
// such cut between marked and unmarked flows.
func TestQoSPriorityLab(t *testing.T) {
	rows := labRun(t, "qos-priority", "--time", "3s",
		"--set", "variants=fifo,htb-priority,pfifo_fast", "--set", "markings=none,0x10,EF", "--set", "bottleneck-rate=1G")
	p99 := map[string]float64{}
	for _, r := range rows {
		v, ok := num(r, "latency_ms.p99")
		key := r["variant"].(string) + "/" + r["marking"].(string)
		if !ok {
			t.Errorf("%s: no p99 (row %v)", key, r)
			continue
		}
		p99[key] = v
		t.Logf("%-22s p99 %8.3f ms  loss %v %%  verdict: %v", key, v, r["loss_pct"], r["verdict"])
	}
	fifo, htb := p99["fifo/EF"], p99["htb-priority/EF"]
	if htb <= 0 || fifo/htb < 10 {
		t.Errorf("htb-priority cut EF's p99 from %.3f ms (fifo) to %.3f ms: %.1f×, want at least 10×", fifo, htb, fifo/htb)
	}
	if p99["fifo/none"] < 1 {
		t.Errorf("the FIFO bottleneck built no queue: unmarked p99 %.3f ms", p99["fifo/none"])
	}
	if p99["pfifo_fast/none"] > p99["fifo/none"]/4 {
		t.Errorf("pfifo_fast at line rate: unmarked p99 %.3f ms, not far below the FIFO bottleneck's %.3f ms", p99["pfifo_fast/none"], p99["fifo/none"])
	}
	best := min(p99["pfifo_fast/TOS 0x10"], p99["pfifo_fast/EF"])
	if best <= 0 || p99["pfifo_fast/none"]/best >= 10 {
		t.Errorf("pfifo_fast at line rate: unmarked p99 %.3f ms, marked %.3f ms: a cut of %.1f× where none is expected",
			p99["pfifo_fast/none"], best, p99["pfifo_fast/none"]/best)
	}
}
