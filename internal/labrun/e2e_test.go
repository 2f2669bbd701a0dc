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
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// runJSON runs `cnperf lab run ARGS --json` and decodes its output.
func runJSON(t *testing.T, bin, name, stateDir string, args ...string) output {
	t.Helper()
	return runJSONExit(t, 0, bin, name, stateDir, args...)
}

// runJSONExit is runJSON for a run that must exit with code want.
func runJSONExit(t *testing.T, want int, bin, name, stateDir string, args ...string) output {
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
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cnperf lab run: %v", err)
	}
	if code != want {
		t.Fatalf("cnperf lab run exited with %d, want %d", code, want)
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
	RunID  string           `json:"run_id"`
	RunIDs []string         `json:"run_ids"`
	Suite  string           `json:"suite"`
	Rows   []map[string]any `json:"rows"`
	// The rest of the report model (internal/report), as printed by
	// cnperf report too; read where a test needs it.
	Status      json.RawMessage `json:"status"`
	Progress    json.RawMessage `json:"progress"`
	CreatedAt   json.RawMessage `json:"created_at"`
	Params      json.RawMessage `json:"params"`
	Outcomes    json.RawMessage `json:"outcomes"`
	Matrices    json.RawMessage `json:"matrices"`
	Shaping     json.RawMessage `json:"shaping"`
	Notes       json.RawMessage `json:"notes"`
	Conclusions json.RawMessage `json:"conclusions"`
	// Environment is what the run ran on.
	Environment *hostinfo.Environment `json:"environment"`
	SLO         []struct {
		Objective struct {
			Connection string `json:"connection"`
			Expr       string `json:"expr"`
		} `json:"objective"`
		Connection string  `json:"connection"`
		Backend    string  `json:"backend"`
		Value      float64 `json:"value"`
		Pass       bool    `json:"pass"`
	} `json:"slo"`
}

// positive are the figures every baseline row must have above zero, with
// the same keys under min and max (pod-service has no ping: a ClusterIP
// answers none).
var positive = []string{
	"throughput_bps.sender", "throughput_bps.receiver", "bytes.sender", "bytes.receiver",
	"cpu_pct.sender", "cpu_pct.receiver", "udp.throughput_bps.receiver", "rtt_ms.avg", "ping.rtt_ms.avg",
}

func checkRows(t *testing.T, out output, backends []string) {
	t.Helper()
	if out.RunID == "" || len(out.RunIDs) != len(backends) || out.RunIDs[0] != out.RunID {
		t.Errorf("run_id %q, run_ids %v: want one run per backend", out.RunID, out.RunIDs)
	}
	conns := len(suite.ConnectionOrder)
	if len(out.Rows) != conns*len(backends) {
		t.Fatalf("%d rows, want %d", len(out.Rows), conns*len(backends))
	}
	for i, row := range out.Rows {
		wantConn, wantBackend := suite.ConnectionOrder[i%conns], backends[i/conns]
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
			if k == "ping.rtt_ms.avg" && wantConn == suite.PodService {
				continue
			}
			v, ok := cnperftest.Num(row, k)
			vlo, ok1 := cnperftest.Num(lo, k)
			vhi, ok2 := cnperftest.Num(hi, k)
			if !ok || !ok1 || !ok2 || v <= 0 || vlo <= 0 || vlo > v || v > vhi {
				t.Errorf("row %d (%s on %s): %s median %v (min %v, max %v), want positive with min <= median <= max", i, wantConn, wantBackend, k, v, vlo, vhi)
			}
		}
		if loss, ok := cnperftest.Num(row, "loss_pct"); !ok || loss < 0 || loss > 100 {
			t.Errorf("row %d: loss_pct %v", i, loss)
		}
		if _, ok := row["overhead_pct"]; ok != (wantConn != suite.NodeNode) {
			t.Errorf("row %d (%s): overhead_pct present %v", i, wantConn, ok)
		}
		if wantConn == suite.PodService {
			// Through the Service: the ClusterIP in the row, and what the
			// DNAT costs against the same pods' path without it.
			if dst, _ := row["dst"].(string); !strings.HasPrefix(dst, "10.96.") {
				t.Errorf("row %d (%s): dst %q, want the Service's ClusterIP first", i, wantConn, dst)
			}
			so, _ := row["service_overhead"].(map[string]any)
			if _, ok := cnperftest.Num(so, "tcp_pct"); !ok {
				t.Errorf("row %d (%s): service_overhead %v lacks tcp_pct", i, wantConn, row["service_overhead"])
			}
			if _, ok := cnperftest.Num(so, "rr_added_ms"); !ok {
				t.Errorf("row %d (%s): service_overhead %v lacks rr_added_ms", i, wantConn, row["service_overhead"])
			}
		}
	}
}

// TestLabRunBaseline runs `cnperf lab run baseline --json` end to end: a
// lab, the real server and agents, the suite through the API.
func TestLabRunBaseline(t *testing.T) {
	nettest.Require(t)
	bin := cnperftest.Binary(t)
	db := filepath.Join(t.TempDir(), "runs.db")
	// One objective every row meets on any machine (a loss is at most
	// 100 %), one none can: the run exits with 3 and still prints its
	// rows with the verdicts.
	slo := filepath.Join(t.TempDir(), "slo.json")
	if err := os.WriteFile(slo, []byte(`{"apiVersion": "cnperf/v1", "objectives": [
		{"expr": "loss_pct <= 100"},
		{"connection": "node-node", "expr": "throughput_bps.receiver > 1000000G"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runJSONExit(t, 3, bin, labName(t), t.TempDir(), "baseline", "--time", "1s", "--repeat", "2", "--db", db, "--slo", slo)
	if len(out.SLO) != 5 {
		t.Fatalf("%d SLO checks, want 5 (loss on 4 rows, throughput on node-node)", len(out.SLO))
	}
	for _, c := range out.SLO {
		if want := c.Objective.Expr == "loss_pct <= 100"; c.Pass != want {
			t.Errorf("SLO %q on %s: pass %v, want %v", c.Objective.Expr, c.Connection, c.Pass, want)
		}
	}
	if out.Suite != "baseline" {
		t.Errorf("suite %q", out.Suite)
	}
	checkRows(t, out, []string{"host-gw"})
	for _, row := range out.Rows {
		if n, _ := row["repetitions"].(float64); n != 2 {
			t.Errorf("%v: %v repetitions, want 2", row["connection"], row["repetitions"])
		}
	}
	checkEnvironment(t, out.Environment, "host-gw")
	checkStored(t, db, out)
}

// checkEnvironment checks the environment block a lab run carries: the
// lab as CNI with its backend, and per node the kernel, CPUs, memory,
// MTUs, offloads and congestion control.
func checkEnvironment(t *testing.T, env *hostinfo.Environment, backend string) {
	t.Helper()
	if env == nil {
		t.Fatal("the run carries no environment block")
	}
	if env.Platform != "lab" || env.CNI != lab.CNIName || env.Backend != backend || len(env.Nodes) != 2 || len(env.Notes) != 0 {
		t.Fatalf("environment = %+v", env)
	}
	for _, n := range env.Nodes {
		if n.Kernel == "" || n.CPUs < 1 || n.MemoryBytes == 0 || n.UnderlayMTU != 1500 || n.PodMTU == 0 || n.CongestionControl == "" || len(n.Offload) == 0 {
			t.Errorf("node %s: %+v", n.Name, n)
		}
	}
	t.Logf("environment: %+v", *env)
}

// checkStored serves the lab server's database again and rebuilds the rows
// from the stored runs alone, as cnperf report RUN_ID does; they must be
// the rows that were printed.
func checkStored(t *testing.T, db string, out output) {
	t.Helper()
	ctx := context.Background()
	_, c := cnperftest.ServeDB(t, db)
	var runs []api.Run
	for _, id := range out.RunIDs {
		run, err := c.GetRun(ctx, id)
		if err != nil {
			t.Fatalf("stored run %s: %v", id, err)
		}
		runs = append(runs, run)
	}
	rows, err := suite.RowsFromRuns(builtin.Registry(), runs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(out.Rows) {
		t.Fatalf("%d rows rebuilt, %d printed", len(rows), len(out.Rows))
	}
	// cnperf report RUN --json carries the environment stored with the run.
	stored, err := report.FromRuns(builtin.Registry(), runs...)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Environment == nil || out.Environment == nil || len(stored.Environment.Nodes) != len(out.Environment.Nodes) || stored.Environment.Backend != out.Environment.Backend {
		t.Errorf("stored environment %+v, printed %+v", stored.Environment, out.Environment)
	}
	for i, r := range rows {
		printed, _ := cnperftest.Num(out.Rows[i], "throughput_bps.receiver")
		if r.Connection != out.Rows[i]["connection"] || r.Backend != out.Rows[i]["backend"] || r.Median["throughput_bps.receiver"] != printed {
			t.Errorf("row %d rebuilt as %s on %s %v, printed %v on %v %v", i, r.Connection, r.Backend, r.Median["throughput_bps.receiver"], out.Rows[i]["connection"], out.Rows[i]["backend"], printed)
		}
	}
}

// TestLabRunCNICompare runs `cnperf lab run cni-compare --backends
// host-gw,vxlan --json` end to end: one lab per backend.
func TestLabRunCNICompare(t *testing.T) {
	nettest.Require(t)
	bin := cnperftest.Binary(t)
	// Both backends' labs write into one database.
	db := filepath.Join(t.TempDir(), "runs.db")
	out := runJSON(t, bin, labName(t), t.TempDir(), "cni-compare", "--backends", "host-gw,vxlan", "--time", "1s", "--repeat", "1", "--db", db)
	checkRows(t, out, []string{"host-gw", "vxlan"})
	checkStored(t, db, out)
}

// TestLabRunInterrupted interrupts a lab run while it measures and checks
// that the lab is removed all the same.
func TestLabRunInterrupted(t *testing.T) {
	nettest.Require(t)
	bin := cnperftest.Binary(t)
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
	bin := cnperftest.Binary(t)
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

// TestRunAgainstLabUp keeps a lab with `cnperf lab up` (server and agents
// included) and runs a suite against it with `cnperf run --lab`.
func TestRunAgainstLabUp(t *testing.T) {
	nettest.Require(t)
	bin := cnperftest.Binary(t)
	name, stateDir := labName(t), t.TempDir()
	cleanupLab(t, name, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cnperf := func(args ...string) ([]byte, error) {
		args = append(args, "--state-dir", stateDir, "--log-level", "warn")
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("cnperf %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	if _, err := cnperf("lab", "up", "--name", name, "--nodes", "2", "--pods-per-node", "2", "--backend", "vxlan"); err != nil {
		t.Fatal(err)
	}
	st, err := lab.Status(name, stateDir)
	if err != nil || st.Cnperf == nil || st.Cnperf.Agents != 6 {
		t.Fatalf("lab up did not record its control plane with 6 agents: %+v %v", st.Cnperf, err)
	}
	raw, err := cnperf("run", "baseline", "--lab", name, "--time", "1s", "--repeat", "1", "--set", "ping-count=5", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var out output
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("decode: %v\n%s", err, raw)
	}
	checkRows(t, out, []string{"vxlan"}) // the lab's backend labels the rows
	if _, err := cnperf("lab", "down", "--name", name); err != nil {
		t.Fatal(err)
	}
	assertNoLab(t, name, stateDir)
}
