package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/agent"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

// testServer is a server run in this process by startServer, with the
// agents started on it by runAgent.
type testServer struct {
	url    string
	ctx    context.Context // cancelled in t.Cleanup, ending server and agents
	agents []chan struct{}
}

// startServer runs a server with the given user and agent tokens on
// loopback; t.Cleanup stops it and every agent runAgent started.
func startServer(t *testing.T, userToken, agentToken string) *testServer {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: userToken, AgentToken: agentToken, MaxWait: time.Second, Probers: probers()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan struct{})
	go func() { defer close(srvDone); _ = srv.Run(ctx) }()
	s := &testServer{url: "http://" + ln.Addr().String(), ctx: ctx}
	t.Cleanup(func() {
		cancel()
		for _, d := range s.agents {
			<-d
		}
		<-srvDone
		srv.CloseDashboard()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = hs.Shutdown(sctx)
		_ = st.Close()
	})
	return s
}

// runAgent runs a until the server's cleanup and waits until it is ready.
func (s *testServer) runAgent(t *testing.T, a *agent.Agent) {
	t.Helper()
	d := make(chan struct{})
	s.agents = append(s.agents, d)
	go func() { defer close(d); _ = a.Run(s.ctx) }()
	select {
	case <-a.Ready():
	case <-d:
		t.Fatal("agent stopped before it was ready")
	case <-time.After(15 * time.Second):
		t.Fatal("agent not ready after 15s")
	}
}

// startAgents runs a server and n agents in this process, agent i as pod
// pod-i on node node-i at 127.0.0.(10+i), and returns the server's URL
// (user token u-tok) once every agent is ready.
func startAgents(t *testing.T, n int) string {
	t.Helper()
	s := startServer(t, "u-tok", "a-tok")
	for i := range n {
		cl, err := client.New(s.url, "a-tok")
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		a, err := agent.New(agent.Options{Client: cl, Probers: probers(), Handlers: handlers(), ResponderPort: -1, StampPort: -1,
			Identity: agent.Identity{PodName: fmt.Sprintf("pod-%d", i), PodNamespace: "test", PodUID: fmt.Sprintf("uid-%d", i),
				PodIP: ip, NodeName: fmt.Sprintf("node-%d", i), NodeIP: ip},
			PollWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.runAgent(t, a)
	}
	return s.url
}

// TestEveryPrintingVerbOutputJSON: -o json on every verb that prints
// gives one valid JSON document on standard output (kubectl's habit), and
// -o csv and -o markdown give a table or the data's fields, not the text
// output. Verbs that need root, a lab or a cluster (lab up/status, qos
// detect, k8s status) are checked where they can run: their -o is the
// same outputFlags.
func TestEveryPrintingVerbOutputJSON(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	t.Setenv("CNPERF_TOKEN", "")
	t.Setenv("CNPERF_USER_TOKEN", "")
	url, a, b, _ := reportFixture(t)
	srv := []string{"--server", url, "--token", "u-tok"}
	resp, _ := startResponder(t)
	slo := filepath.Join(t.TempDir(), "slo.json")
	if err := os.WriteFile(slo, []byte(`{"apiVersion": "cnperf/v1", "objectives": [{"expr": "success >= 99 % over 1h"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster := []string{"--server", startAgents(t, 2), "--token", "u-tok"}
	listed, _, err := runCLI(t, append([]string{"task", "list", "-o", "json"}, srv...)...)
	var page struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	if err != nil || json.Unmarshal([]byte(listed), &page) != nil || len(page.Tasks) == 0 {
		t.Fatalf("task list: %v\n%s", err, listed)
	}
	task := page.Tasks[0].TaskID

	verbs := []struct {
		name string
		args []string
		// exit is the exit code the verb ends with on this data (slo
		// check: no mesh rounds stored, so the objective fails).
		exit int
	}{
		{"version", []string{"version"}, 0},
		{"suites", []string{"suites"}, 0},
		{"suites SUITE", []string{"suites", "baseline"}, 0},
		{"clients", append([]string{"clients"}, srv...), 0},
		{"task list", append([]string{"task", "list"}, srv...), 0},
		{"task get", append([]string{"task", "get", task}, srv...), 0},
		{"task raw", append([]string{"task", "raw", task}, srv...), 0},
		{"schedule list", append([]string{"schedule", "list"}, srv...), 0},
		{"report", append([]string{"report", a}, srv...), 0},
		{"compare", append([]string{"compare", a, b}, srv...), 0},
		{"slo check", append([]string{"slo", "check", "--slo", slo}, srv...), ExitSLOFailed},
		{"probe", []string{"probe", "tcp", "--to", resp, "-t", "300ms"}, 0},
		{"qos show", []string{"qos", "show", "--link", "lo"}, 0},
		{"run", append([]string{"run", "matrix", "--time", "300ms", "--repeat", "1", "--set", "ping-count=3", "--set", "udp-rate=50M"}, cluster...), 0},
	}
	for _, v := range verbs {
		t.Run(v.name, func(t *testing.T) {
			for _, o := range []string{"json", "yaml", "csv", "markdown"} {
				if v.name == "run" && o != "json" {
					continue // one suite run is enough: its formats share write
				}
				out, errs, err := runCLI(t, append(v.args, "-o", o)...)
				code := 0
				if err != nil {
					code = 1
					if ee, ok := err.(*ExitError); ok {
						code = ee.Code
					}
				}
				if code != v.exit {
					t.Fatalf("-o %s: exit %d (%v), want %d\n%s", o, code, err, v.exit, errs)
				}
				switch o {
				case "json":
					var doc any
					if err := json.Unmarshal([]byte(out), &doc); err != nil {
						t.Errorf("-o json is not one JSON document: %v\n%s", err, out)
					}
				case "yaml":
					if strings.HasPrefix(strings.TrimSpace(out), "{") || out == "" {
						t.Errorf("-o yaml printed no YAML:\n%s", out)
					}
				case "csv":
					first := strings.SplitN(out, "\n", 2)[0]
					if !strings.Contains(first, ",") {
						t.Errorf("-o csv: first line %q is no CSV header", first)
					}
				case "markdown":
					if !strings.HasPrefix(out, "|") && !strings.HasPrefix(out, "#") {
						t.Errorf("-o markdown printed no Markdown table:\n%s", out)
					}
				}
			}
		})
	}
}

// TestReportOutputFile: report's -o names a format; --output-file (and -o
// with a value that names no format, as -o was before) writes a file.
func TestReportOutputFile(t *testing.T) {
	t.Setenv("CNPERF_SERVER", "")
	t.Setenv("CNPERF_TOKEN", "")
	t.Setenv("CNPERF_USER_TOKEN", "")
	url, a, _, _ := reportFixture(t)
	srv := []string{"--server", url, "--token", "u-tok"}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		args       []string
	}{
		{"--output-file", filepath.Join(dir, "a.json"), []string{"-o", "json", "--output-file", filepath.Join(dir, "a.json")}},
		{"-o FILE", filepath.Join(dir, "b.txt"), []string{"-o", filepath.Join(dir, "b.txt")}},
	} {
		out, _, err := runCLI(t, append(append([]string{"report", a}, tc.args...), srv...)...)
		if err != nil || out != "" {
			t.Fatalf("%s: %v, stdout %q", tc.name, err, out)
		}
		data, err := os.ReadFile(tc.file)
		if err != nil || len(data) == 0 {
			t.Fatalf("%s: %v, %d bytes", tc.name, err, len(data))
		}
		if strings.HasSuffix(tc.file, ".json") && !json.Valid(data) {
			t.Errorf("%s: not JSON", tc.name)
		}
	}
	if _, _, err := runCLI(t, append([]string{"report", a, "--format", "csv", "-o", "json"}, srv...)...); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("--format csv -o json: %v, want a refusal", err)
	}
}
