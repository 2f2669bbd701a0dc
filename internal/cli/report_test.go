package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

// reportFixture starts a real server and stores two baseline runs whose
// results an agent reports from reporttest's generated figures (the second
// 30 % slower), and a plain task run. It returns the server URL and the
// run ids.
func reportFixture(t *testing.T) (url string, a, b, plain string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: "u-tok", AgentToken: "a-tok", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.CloseDashboard(); ts.Close(); _ = st.Close() })

	user, _ := client.New(ts.URL, "u-tok")
	agent, _ := client.New(ts.URL, "a-tok")
	outs := reporttest.Baseline([]string{"host-gw"}, 2, 1)
	endpoints := map[string]suite.Endpoint{}
	beat := func(e suite.Endpoint) {
		if _, err := agent.Heartbeat(ctx, api.Heartbeat{PodName: e.Name, PodUID: e.ID, PodIP: e.IP, NodeName: e.Node, HostNetwork: e.HostNetwork, ResponderAddr: e.ResponderAddr}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range outs[:12] { // the endpoints of the first repetition's steps
		for _, e := range []suite.Endpoint{o.Step.Src, o.Step.Dst} {
			endpoints[e.ID] = e
			beat(e)
		}
	}
	// The fake agents heartbeat every second on their own, as real agents
	// do: a fetch that waits for a destination's test key must not keep
	// them silent (on a loaded machine with -race the loop below took over
	// the server's 10 s OfflineAfter and the reaper failed their tasks).
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, e := range endpoints {
				_, _ = agent.Heartbeat(ctx, api.Heartbeat{PodName: e.Name, PodUID: e.ID, PodIP: e.IP, NodeName: e.Node, HostNetwork: e.HostNetwork, ResponderAddr: e.ResponderAddr})
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-beats })
	store1 := func(scale float64, inv string) string {
		outs := reporttest.Baseline([]string{"host-gw"}, 2, scale)
		var steps []suite.Step
		var tasks []api.RunTask
		for _, o := range outs {
			steps = append(steps, o.Step)
			tasks = append(tasks, o.Step.Task())
		}
		params, _ := json.Marshal(suite.RunParams{APIVersion: suite.ParamsAPIVersion, Suite: "baseline", Invocation: inv,
			Phase: "baseline", Phases: 1, Options: suite.Options{Time: 5 * time.Second, Repeat: 2, Backend: "host-gw"}, Steps: steps})
		run, err := user.CreateRun(ctx, api.RunCreate{Suite: "baseline", Params: params, Tasks: tasks, AllowConcurrency: true})
		if err != nil {
			t.Fatal(err)
		}
		full, err := user.GetRun(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		byTask := map[string]int{}
		for i, task := range full.Tasks {
			byTask[task.TaskID] = i // tasks come in creation order
		}
		// Each source agent reports the generated result of its tasks.
		deadline := time.Now().Add(30 * time.Second)
		for left := len(outs); left > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%d tasks not reported", left)
			}
			for _, uid := range []string{"uid-a1", "uid-b1", "uid-a2", "uid-h1", "uid-h2"} {
				rep, err := agent.Fetch(ctx, uid, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range rep.Tasks {
					res, _ := json.Marshal(outs[byTask[task.TaskID]].Result)
					if _, err := agent.Report(ctx, api.Report{TaskID: task.TaskID, PodUID: uid, ReportID: "r" + task.TaskID, State: api.StateSucceeded, Result: res}); err != nil {
						t.Fatal(err)
					}
					left--
				}
			}
		}
		return run.ID
	}
	a, b = store1(1, "inv-a"), store1(0.7, "inv-b")
	pr, err := user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{outs[0].Step.Task()}})
	if err != nil {
		t.Fatal(err)
	}
	return ts.URL, a, b, pr.ID
}

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), err
}

func TestReportAndCompareVerbs(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	t.Setenv("CNPERF_TOKEN", "")
	t.Setenv("CNPERF_USER_TOKEN", "")
	url, a, b, plain := reportFixture(t)
	srv := []string{"--server", url, "--token", "u-tok"}

	out, _, err := runCLI(t, append([]string{"report", a}, srv...)...)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	for _, want := range []string{"run " + a + " · baseline · succeeded (24/24 measurements)", "pod-pod cross node", "TCP Mbit/s", "VS NODE-NODE"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	html := filepath.Join(t.TempDir(), "r.html")
	if _, _, err := runCLI(t, append([]string{"report", a, "--html", html}, srv...)...); err != nil {
		t.Fatalf("report --html: %v", err)
	}
	page, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(page, []byte(`id="bars-throughput"`)) || !bytes.Contains(page, []byte("<svg")) {
		t.Errorf("html report: %v, %d bytes, charts missing", err, len(page))
	}
	out, _, err = runCLI(t, append([]string{"report", a, "--format", "csv"}, srv...)...)
	if err != nil || !strings.HasPrefix(out, "run_id,suite,backend") || strings.Count(out, "\n") < 50 {
		t.Errorf("csv: %v, %d lines", err, strings.Count(out, "\n"))
	}
	out, _, err = runCLI(t, append([]string{"report", a, "--format", "iperf3"}, srv...)...)
	var docs []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &docs) != nil || len(docs) != 12 {
		t.Errorf("iperf3: %v, %d documents, want 12", err, len(docs))
	}

	// 30 % slower TCP: flagged worse; exit 3 with --fail-on-regression.
	out, _, err = runCLI(t, append([]string{"compare", a, b, "--fail-on-regression"}, srv...)...)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitRegression {
		t.Fatalf("compare: err %v, want exit code %d", err, ExitRegression)
	}
	if !strings.Contains(out, "6 worse") {
		t.Errorf("compare output lacks the 6 throughput regressions:\n%s", out)
	}
	// The same run against itself: nothing worse, exit 0.
	if out, _, err = runCLI(t, append([]string{"compare", a, a, "--fail-on-regression"}, srv...)...); err != nil || !strings.Contains(out, "0 worse") {
		t.Errorf("compare a run with itself: %v\n%s", err, out)
	}

	bad := []struct {
		name string
		args []string
		says string
	}{
		{"unknown run", []string{"report", "no-such-run"}, "no such run"},
		{"unknown format", []string{"report", a, "--format", "xml"}, `--format "xml"`},
		{"different suites", []string{"compare", a, plain}, "different suites"},
		{"unknown run in compare", []string{"compare", a, "ghost"}, "run ghost: no such run"},
		{"bad tolerance", []string{"compare", a, b, "--tolerance", "0"}, "--tolerance"},
		{"iperf3 of a run without tcp/udp", []string{"report", plain, "--format", "iperf3"}, "no tcp or udp results"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCLI(t, append(tc.args, srv...)...)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err %v, want one saying %q", err, tc.says)
			}
		})
	}
	if _, _, err := runCLI(t, "report", a); err == nil || !strings.Contains(err.Error(), "no server") {
		t.Errorf("report without a server: %v", err)
	}
}

func TestWriteSuiteHTML(t *testing.T) {
	rep := report.FromOutcomes("r1", "baseline", reporttest.Baseline([]string{"vxlan"}, 2, 1))
	p := filepath.Join(t.TempDir(), "suite.html")
	var out bytes.Buffer
	st := Streams{Out: &out, Err: io.Discard}
	if err := (&suiteFlags{html: p, format: "csv"}).write(st, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Run r1", `id="bars-throughput"`, `id="throughput-time"`, "vxlan"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("suite HTML lacks %q", want)
		}
	}
	if !strings.HasPrefix(out.String(), "run_id,suite,") {
		t.Errorf("--csv beside --html printed %q", out.String()[:min(out.Len(), 80)])
	}
	// A directory that does not exist: an error naming the file, nothing left behind.
	bad := filepath.Join(t.TempDir(), "missing", "x.html")
	if err := (&suiteFlags{html: bad}).write(st, rep); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("write into a missing directory: %v", err)
	}
}
