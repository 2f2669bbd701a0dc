package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestScheduleRunsMatrixTwice runs `cnperf server --schedule-min-every 1s`
// and three real `cnperf agent` processes on three loopback "nodes",
// refuses bad schedules with clear errors, creates a matrix schedule
// every 2 s with an SLO, and waits until the server has run it twice by
// itself: both runs stored, linked to the schedule, never overlapping, a
// due time that came while one ran started when it ended, the figures of
// every node pair and the SLO verdict on /metrics. The schedule and its
// history survive a server restart; deleting it keeps its runs.
func TestScheduleRunsMatrixTwice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the matrix's ping probes need ICMP sockets: run as root")
	}
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	began := time.Now()
	bin := cnperftest.Binary(t)
	defer func() { t.Logf("took %v", time.Since(began).Round(time.Second)) }()
	addr := freeAddr(t)
	serverEnv := []string{"CNPERF_USER_TOKEN=u-sched", "CNPERF_AGENT_TOKEN=a-sched"}
	serve := func() *proc {
		p := start(t, "server", bin, serverEnv, append([]string{"server", "--listen", addr, "--db", "sqlite:" + filepath.Join(dir, "cnperf.db"),
			"--schedule-min-every", "1s"}, loopbackServer...)...)
		p.waitFor(t, "server listening", 20*time.Second)
		return p
	}
	srv := serve()
	base := "http://" + addr
	for i, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		name := "n" + strconv.Itoa(i+1)
		env := []string{"CNPERF_AGENT_TOKEN=a-sched", "POD_NAME=pod-" + name, "POD_UID=uid-" + name, "POD_IP=" + ip, "NODE_NAME=" + name, "NODE_IP=" + ip}
		a := start(t, name, bin, env, "agent", "--server", base, "--responder-port", "0", "--state-dir", filepath.Join(dir, name))
		a.waitFor(t, "agent ready", 20*time.Second)
	}
	remote := []string{"--server", base, "--token", "u-sched"}
	cli := func(args ...string) (int, string, string) {
		return runBinary(t, bin, append(args, remote...)...)
	}

	// Bad input: a clear error, a non-zero exit, nothing stored.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--suite", "matrix", "--every", "soon"}, `--every "soon": want a duration`},
		{[]string{"--suite", "matrix", "--every", "500ms"}, "want at least 1s"},
		{[]string{"--suite", "matrix", "--every", "800h"}, "at most 744h"},
		{[]string{"--suite", "nosuch", "--every", "1h"}, `unknown suite "nosuch"`},
		{[]string{"--suite", "matrix", "--every", "1h", "--set", "udp-rat=1M"}, "unknown setting udp-rat"},
		{[]string{"--suite", "matrix", "--every", "1h", "--set", "endpoints=racks"}, "racks"},
		{[]string{"--every", "1h"}, "--suite"},
		{[]string{"--suite", "matrix", "--every", "1h", "--repeat", "0"}, "--repeat 0: want 1-100"},
		{[]string{"--suite", "matrix", "--every", "1h", "--time", "0"}, "time 0s"},
	} {
		code, out, errs := cli(append([]string{"schedule", "create"}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("schedule create %v: exit %d, stderr %q, stdout %q; want an error saying %q", c.args, code, errs, out, c.want)
		}
	}
	if code, out, _ := cli("schedule", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after refused creates: exit %d, %s; want []", code, out)
	}

	// An SLO with one objective every pair meets and one none does.
	slo := filepath.Join(dir, "slo.json")
	if err := os.WriteFile(slo, []byte(`{"apiVersion":"cnperf/v1","objectives":[
		{"expr":"udp.loss_pct <= 100"},{"expr":"throughput_bps.receiver >= 1000G"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli("schedule", "create", "--suite", "matrix", "--every", "2s", "--time", "300ms", "--repeat", "1",
		"--set", "ping-count=3", "--set", "udp-rate=50M", "--slo", slo, "--json")
	if code != 0 {
		t.Fatalf("schedule create: exit %d: %s", code, errs)
	}
	var sc api.Schedule
	if err := json.Unmarshal([]byte(out), &sc); err != nil || sc.ID == "" || sc.EveryS != 2 {
		t.Fatalf("created %s: %v", out, err)
	}

	// The server runs it by itself; wait for two runs that succeeded.
	var hist []api.ScheduleRun
	var done []api.ScheduleRun
	deadline := time.Now().Add(90 * time.Second)
	for len(done) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("two runs did not succeed within 90 s: %+v", hist)
		}
		time.Sleep(500 * time.Millisecond)
		code, out, errs := cli("schedule", "runs", sc.ID, "--json")
		if code != 0 {
			t.Fatalf("schedule runs: exit %d: %s", code, errs)
		}
		hist = nil
		if err := json.Unmarshal([]byte(out), &hist); err != nil {
			t.Fatalf("runs %s: %v", out, err)
		}
		done = done[:0]
		for _, r := range hist {
			if r.State == api.ScheduleFailed {
				t.Fatalf("run %d failed: %s", r.ID, r.Reason)
			}
			if r.State == api.ScheduleSucceeded {
				done = append(done, r)
			}
		}
	}
	user := httpc{t: t, base: base, token: "u-sched"}
	seen := map[string]bool{}
	for _, r := range done {
		if r.Summary == nil || r.Summary.Pairs != 6 {
			t.Errorf("run %d: summary %+v, want 6 node pairs", r.ID, r.Summary)
			continue
		}
		if v := r.Summary.SLO; v == nil || v.Pass || v.Failed != 6 || v.Checks != 12 {
			t.Errorf("run %d: SLO verdict %+v, want failed: 6 of 12 checks (every pair below 1000G)", r.ID, v)
		}
		// 3 nodes: 2N = 6 rounds, one run each, every one stored and
		// saying which schedule run it belongs to.
		if len(r.RunIDs) != 6 {
			t.Errorf("run %d made %d runs, want 6 (one per round)", r.ID, len(r.RunIDs))
		}
		for _, id := range r.RunIDs {
			if seen[id] {
				t.Errorf("run %s belongs to two schedule runs", id)
			}
			seen[id] = true
			var run api.Run
			if code := user.call("GET", "/api/v2/runs/"+id, nil, &run); code != 200 || run.Suite != "matrix" || run.State != api.RunSucceeded {
				t.Errorf("run %s: HTTP %d, suite %q, state %q", id, code, run.Suite, run.State)
			}
			var p suite.RunParams
			if err := json.Unmarshal(run.Params, &p); err != nil || p.Invocation != "schedule-"+sc.ID+"-"+strconv.FormatInt(r.ID, 10) {
				t.Errorf("run %s: invocation %q (%v), want the schedule run's", id, p.Invocation, err)
			}
		}
	}
	// Never two at once: the finished runs do not overlap, and a due time
	// that came while one ran started once it ended (the matrix cycles:
	// its late due times run, not skipped).
	for i := range hist {
		for j := i + 1; j < len(hist); j++ {
			a, b := hist[i], hist[j]
			if a.FinishedAt == nil || b.FinishedAt == nil {
				continue
			}
			if a.StartedAt.Before(*b.FinishedAt) && b.StartedAt.Before(*a.FinishedAt) {
				t.Errorf("runs %d and %d overlap: %v-%v and %v-%v", a.ID, b.ID, a.StartedAt, a.FinishedAt, b.StartedAt, b.FinishedAt)
			}
		}
	}
	for _, r := range hist {
		if r.State == api.ScheduleSkipped {
			t.Errorf("record %d skipped (%s): a matrix schedule's late due time should start when the run going ends", r.ID, r.Reason)
		}
	}
	// hist is newest first: done[0] followed done[1].
	prev, next := done[1], done[0]
	took := prev.FinishedAt.Sub(prev.StartedAt)
	gap := next.StartedAt.Sub(*prev.FinishedAt)
	t.Logf("%d records, %d succeeded; a run took %v, the next started %v after it ended (due %v)", len(hist), len(done), took, gap, next.DueAt)
	if took > 2*time.Second && (gap > 3*time.Second || !next.DueAt.Before(*prev.FinishedAt)) {
		t.Errorf("a run took %v, longer than the 2 s interval, yet the next started %v after it (due %v): want a late due time started within a tick or two", took, gap, next.DueAt)
	}

	// /metrics: every pair's figures from the latest run, the verdict.
	metricsText := scrapeText(t, base)
	for _, src := range []string{"n1", "n2", "n3"} {
		for _, dst := range []string{"n1", "n2", "n3"} {
			if src == dst {
				continue
			}
			labels := `{dst_node="` + dst + `",schedule="` + sc.ID + `",src_node="` + src + `"}`
			if v := metricValue(t, metricsText, "cnperf_matrix_pair_throughput_bytes_per_second"+labels); v <= 0 {
				t.Errorf("%s -> %s throughput %v on /metrics", src, dst, v)
			}
			if v := metricValue(t, metricsText, "cnperf_matrix_pair_loss_ratio"+labels); v < 0 || v > 1 {
				t.Errorf("%s -> %s loss ratio %v", src, dst, v)
			}
			rr := `{dst_node="` + dst + `",probe="rr",schedule="` + sc.ID + `",src_node="` + src + `",stat="p50"}`
			if v := metricValue(t, metricsText, "cnperf_matrix_pair_rtt_seconds"+rr); v <= 0 || v > 1 {
				t.Errorf("%s -> %s rr p50 %v s", src, dst, v)
			}
		}
	}
	sl := `{schedule="` + sc.ID + `",suite="matrix"}`
	for name, want := range map[string]float64{"cnperf_schedule_slo_pass": 0, "cnperf_schedule_slo_failed_checks": 6, "cnperf_schedule_last_run_success": 1} {
		if v := metricValue(t, metricsText, name+sl); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := metricValue(t, metricsText, `cnperf_matrix_pairs{schedule="`+sc.ID+`"}`); v != 6 {
		t.Errorf("cnperf_matrix_pairs = %v, want 6", v)
	}

	// The dashboard's Schedules page lists it with its runs and links.
	page := getPage(t, base+"/schedules", "u-sched")
	for _, want := range []string{`data-schedule="` + sc.ID + `"`, `data-state="succeeded"`, `href="/runs/` + done[0].RunIDs[0] + `"`, "FAIL 6/12"} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard /schedules lacks %s", want)
		}
	}

	// The schedule and its history survive a restart of the server.
	srv.stop(t, 20*time.Second)
	srv = serve()
	code, out, errs = cli("schedule", "list")
	if code != 0 || !strings.Contains(out, sc.ID) || !strings.Contains(out, "matrix") {
		t.Fatalf("list after restart: exit %d %s %s", code, out, errs)
	}
	t.Logf("cnperf schedule list:\n%s", out)
	var after []api.ScheduleRun
	if code := user.call("GET", "/api/v2/schedules/"+sc.ID+"/runs?limit=1000", nil, &after); code != 200 || len(after) < len(hist) {
		t.Errorf("history after restart: HTTP %d, %d records, want at least %d", code, len(after), len(hist))
	}

	// Delete: gone from the list, its runs kept.
	if code, out, errs := cli("schedule", "delete", sc.ID); code != 0 || !strings.Contains(out, "deleted schedule "+sc.ID) {
		t.Fatalf("delete: exit %d %s %s", code, out, errs)
	}
	if code, _, errs := cli("schedule", "delete", sc.ID); code == 0 || !strings.Contains(errs, "not found") {
		t.Errorf("delete twice: exit %d, %s; want not found", code, errs)
	}
	if code, out, _ := cli("schedule", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list after delete: %s", out)
	}
	var run api.Run
	if code := user.call("GET", "/api/v2/runs/"+done[0].RunIDs[0], nil, &run); code != 200 {
		t.Errorf("a run of the deleted schedule: HTTP %d, want kept", code)
	}
	srv.stop(t, 40*time.Second)
}

// runBinary runs the cnperf binary with args, bounded, and returns its exit
// code, stdout and stderr.
func runBinary(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("cnperf %s: %v (stderr %s)", strings.Join(args, " "), err, errb.String())
	return 0, "", ""
}

// getPage reads a dashboard page with the user token as a bearer.
func getPage(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d, %v: %s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

// scrapeText reads /metrics.
func scrapeText(t *testing.T, base string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	return string(b)
}

// metricValue returns the value of the series written exactly as
// name{labels} in the text format, or fails the test.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}
