package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

// storeMeshRound stores one ping-mesh round created at `at`, as the mesh
// scheduler plans it, with each ping's result: answered of 5 requests, or
// a failed task when answered is -1.
func storeMeshRound(ctx context.Context, t *testing.T, st store.Store, agents []api.Agent, at time.Time, answered func(i int) int) {
	t.Helper()
	steps, err := mesh.Plan(agents, mesh.Options{Peers: 1, Count: 5}, 0)
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(suite.RunParams{APIVersion: suite.ParamsAPIVersion, Suite: mesh.Suite, Phase: "ping mesh", Phases: 1,
		Options: suite.Options{Time: time.Minute, Repeat: 1}, Steps: steps})
	var tasks []store.Task
	for _, s := range steps {
		spec, _ := json.Marshal(s.Spec)
		tasks = append(tasks, store.Task{Type: api.TypeProbe, Spec: spec, SrcPodUID: s.Src.ID, DstPodUID: s.Dst.ID, Timeout: 30 * time.Second})
	}
	_, made, err := st.CreateRun(ctx, store.Run{Suite: mesh.Suite, Params: params, AllowConcurrency: true}, tasks, at)
	if err != nil {
		t.Fatal(err)
	}
	for i, task := range made {
		claimed, err := st.ClaimTasks(ctx, task.SrcPodUID, at, 100, time.Minute)
		if err != nil || len(claimed) == 0 {
			t.Fatalf("claim: %v (%d)", err, len(claimed))
		}
		rep := store.Report{TaskID: task.TaskID, AgentUID: task.SrcPodUID, ReportID: "r-" + task.TaskID}
		if n := answered(i); n < 0 {
			rep.State, rep.Reason = store.TaskFailed, "ping: no route to host"
		} else {
			res, _ := json.Marshal(probe.Result{Kind: probe.KindPing, Packets: &probe.PacketCounts{Sent: 5, Received: int64(n), Lost: int64(5 - n)}})
			rep.State, rep.Result = store.TaskSucceeded, res
		}
		if _, _, err := st.Complete(ctx, rep, at.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSLOCheckAvailability: `cnperf slo check` reads the ping mesh's
// rounds the server stored in the window (not the older ones) and passes
// an objective the answered requests meet, fails one they miss, and fails
// a window the rounds do not cover.
func TestSLOCheckAvailability(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	t.Setenv("CNPERF_TOKEN", "")
	t.Setenv("CNPERF_USER_TOKEN", "")
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	var agents []api.Agent
	for i := 1; i <= 3; i++ {
		a := store.Agent{PodUID: fmt.Sprintf("uid-%d", i), PodName: fmt.Sprintf("p%d", i), NodeName: fmt.Sprintf("n%d", i), PodIP: fmt.Sprintf("10.244.%d.2", i)}
		if _, err := st.UpsertHeartbeat(ctx, a, now); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, api.Agent{PodUID: a.PodUID, PodName: a.PodName, NodeName: a.NodeName, PodIP: a.PodIP, Status: "free"})
	}
	// An hour of rounds every 5 minutes, 3 pings of 5 requests each: one
	// request lost in the round of 30 minutes ago, one ping failed in the
	// round of 10 minutes ago. Two hours ago, outside the window, a round
	// of nothing but failures.
	storeMeshRound(ctx, t, st, agents, now.Add(-2*time.Hour), func(int) int { return -1 })
	for m := 55; m >= 0; m -= 5 {
		storeMeshRound(ctx, t, st, agents, now.Add(-time.Duration(m)*time.Minute), func(i int) int {
			switch {
			case m == 30 && i == 0:
				return 4
			case m == 10 && i == 2:
				return -1
			}
			return 5
		})
	}
	srv, err := server.New(server.Options{Store: st, UserToken: "u-tok", AgentToken: "a-tok"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvFlags := []string{"--server", hs.URL, "--token", "u-tok"}
	// 12 rounds × 15 requests = 180 sent; 1 lost and 5 of a failed ping:
	// 174 answered, 96.67 %.
	pass := write("pass.json", `{"apiVersion": "cnperf/v1", "objectives": [{"expr": "success >= 95 % over 1h"}]}`)
	out, _, err := runCLI(t, append([]string{"slo", "check", "--slo", pass, "--json"}, srvFlags...)...)
	if err != nil {
		t.Fatalf("slo check: %v\n%s", err, out)
	}
	var res struct {
		Checks []suite.Check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	a := res.Checks[0].Availability
	if len(res.Checks) != 1 || !res.Checks[0].Pass || a == nil || a.Sent != 180 || a.Received != 174 || a.Rounds != 12 || a.Failed != 1 || a.Probes != 36 {
		t.Fatalf("checks %s", out)
	}
	fail := write("fail.json", `{"apiVersion": "cnperf/v1", "objectives": [{"expr": "success >= 99.9 % over 1h"}, {"connection": "pod-pod cross node", "expr": "success >= 99.9% over 20m"}]}`)
	out, _, err = runCLI(t, append([]string{"slo", "check", "--slo", fail}, srvFlags...)...)
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != ExitSLOFailed {
		t.Fatalf("slo check of a missed objective: %v, want exit %d\n%s", err, ExitSLOFailed, out)
	}
	t.Logf("cnperf slo check:\n%s", out)
	for _, want := range []string{"FAIL  success >= 99.9 % over 1h (ping mesh): 96.6667 % over 1h0m0s: 174 of 180 echo requests answered in 12 rounds (36 probes, 1 failed)",
		"FAIL  success >= 99.9% over 20m (ping mesh, pod-pod cross node): 91.6667 % over 20m0s: 55 of 60 echo requests answered in 4 rounds (12 probes, 1 failed)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// A window longer than the stored rounds span is not vouched for.
	long := write("long.json", `{"apiVersion": "cnperf/v1", "objectives": [{"expr": "success >= 50 % over 24h"}]}`)
	out, _, err = runCLI(t, append([]string{"slo", "check", "--slo", long}, srvFlags...)...)
	if !errors.As(err, &exit) || !strings.Contains(out, "cover only 2h0m") {
		t.Errorf("24h window over 2h of rounds: %v\n%s", err, out)
	}
	// Objectives on rows need a run.
	rows := write("rows.json", `{"apiVersion": "cnperf/v1", "objectives": [{"expr": "loss_pct < 1"}]}`)
	if _, _, err := runCLI(t, append([]string{"slo", "check", "--slo", rows}, srvFlags...)...); err == nil || !strings.Contains(err.Error(), "evaluated with a run") {
		t.Errorf("row objective: %v", err)
	}
}
