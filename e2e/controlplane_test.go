package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// proc is a cnperf process started by the test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *cnperftest.SyncBuffer
	done chan struct{}
	err  error // Wait's error; read after done
}

// loopbackServer are the opt-ins of the servers these tests start: they
// test dispatch and delivery, not TLS (TestServerTLSByDefault does), and
// their agents take pod addresses 127.0.0.2, 127.0.0.3, ... while their
// requests come from 127.0.0.1.
var loopbackServer = []string{"--plain-http", "--trust-agent-addrs"}

// startServer starts `cnperf server` on a free loopback port with its
// SQLite database in dir, user token u-TAG and agent (join) token a-TAG,
// and waits until it listens.
func startServer(t *testing.T, bin, dir, tag string) (*proc, string) {
	t.Helper()
	addr := freeAddr(t)
	srv := start(t, "server", bin, []string{"CNPERF_USER_TOKEN=u-" + tag, "CNPERF_AGENT_TOKEN=a-" + tag},
		append([]string{"server", "--listen", addr, "--db", "sqlite:" + filepath.Join(dir, "cnperf.db")}, loopbackServer...)...)
	srv.waitFor(t, "server listening", 20*time.Second)
	return srv, addr
}

func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &cnperftest.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and checks the process exits 0 within limit.
func (p *proc) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s exited with %v after SIGTERM", p.name, p.err)
		}
	case <-time.After(limit):
		t.Errorf("%s still running %v after SIGTERM", p.name, limit)
	}
}

func (p *proc) waitFor(t *testing.T, text string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.out.String(), text) {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before printing %q", p.name, p.err, text)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %v", p.name, text, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpc speaks to the server as a curl user would.
type httpc struct {
	t     *testing.T
	base  string
	token string
}

func (h httpc) call(method, path string, body any, out any) int {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, h.base+path, r)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// v1 calls the seed API and returns the envelope's data.
func (h httpc) v1(method, path string, body any, data any) {
	h.t.Helper()
	var env api.Envelope
	if code := h.call(method, path, body, &env); code != 200 || env.Status != 0 {
		h.t.Fatalf("%s %s: HTTP %d status %d msg %q", method, path, code, env.Status, env.Msg)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		h.t.Fatalf("%s %s: data %s: %v", method, path, env.Data, err)
	}
}

// TestControlPlaneEndToEnd runs `cnperf server` and two `cnperf agent`
// processes on 127.0.0.2 and 127.0.0.3, replays the seed's user workflow
// over HTTP (clients, task/create with a ping and an iperf task, task
// results), runs cnperf's own tcp and rr probes through the v2 API and
// reads their results back, then stops everything with SIGTERM.
func TestControlPlaneEndToEnd(t *testing.T) {
	for _, tool := range []string{"ping", "iperf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/install-test-deps.sh installs it)", tool)
		}
	}
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	srv, addr := startServer(t, bin, dir, "e2e")
	base := "http://" + addr
	agent := func(name, ip string) *proc {
		// Identity from the Downward API variables, as in a pod.
		env := []string{"CNPERF_AGENT_TOKEN=a-e2e", "POD_NAME=" + name, "POD_NAMESPACE=e2e", "POD_UID=uid-" + name,
			"POD_IP=" + ip, "NODE_NAME=node-" + name, "NODE_IP=" + ip}
		return start(t, name, bin, env, "agent", "--server", base, "--responder-port", "0", "--max-parallel", "2",
			"--state-dir", filepath.Join(dir, name))
	}
	a, b := agent("pod-a", "127.0.0.2"), agent("pod-b", "127.0.0.3")
	a.waitFor(t, "agent ready", 20*time.Second)
	b.waitFor(t, "agent ready", 20*time.Second)
	user := httpc{t: t, base: base, token: "u-e2e"}

	// 1. The online clients.
	var clients []api.Client
	user.v1("GET", "/api/v1/external/clients", nil, &clients)
	byName := map[string]api.Client{}
	for _, c := range clients {
		byName[c.PodName] = c
	}
	ca, cb := byName["pod-a"], byName["pod-b"]
	if len(clients) != 2 || ca.PodIP != "127.0.0.2" || cb.PodIP != "127.0.0.3" || ca.ClientStatus != api.ClientStatusFree || ca.NodeName != "node-pod-a" {
		t.Fatalf("clients: %+v", clients)
	}

	// 2. A ping and an iperf task from a to b, as the seed's user did.
	var ids []string
	user.v1("POST", "/api/v1/external/task/create", []api.TaskCreate{
		{SrcPodUID: ca.PodUID, SrcPodIP: ca.PodIP, DstPodUID: cb.PodUID, DstPodIP: cb.PodIP, TaskParam: "-c 5 -i 0.2", TaskType: "ping"},
		{SrcPodUID: ca.PodUID, SrcPodIP: ca.PodIP, DstPodUID: cb.PodUID, DstPodIP: cb.PodIP, TaskParam: "-t 2 -i 1 -f M", TaskType: "iperf"},
	}, &ids)
	if len(ids) != 2 {
		t.Fatalf("task ids: %v", ids)
	}

	// 3. Their results.
	want := []string{"5 packets transmitted, 5 received", "MBytes/sec"}
	for i, id := range ids {
		var task api.Task
		deadline := time.Now().Add(60 * time.Second)
		for {
			user.v1("GET", "/api/v1/external/task?task_id="+id, nil, &task)
			if task.TaskStatus >= api.TaskStatusFinished {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %d (%s) after 60s", id, task.TaskStatus, task.TaskState)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if task.TaskStatus != api.TaskStatusFinished || !strings.Contains(task.TaskResult, want[i]) {
			t.Errorf("task %s (%s): TaskStatus %d reason %q result %.400q", id, task.TaskType, task.TaskStatus, task.TaskReason, task.TaskResult)
		}
		if task.TaskID != id || task.SrcPodIP != "127.0.0.2" || task.DstPodIP != "127.0.0.3" || task.CreateTime.IsZero() || task.UpdateTime.Before(task.CreateTime) {
			t.Errorf("task fields: %+v", task)
		}
	}

	// 4. cnperf's own probes through the v2 API, results read back.
	var run api.Run
	code := user.call("POST", "/api/v2/runs", api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second)}},
		{Src: "pod-b", Dst: "pod-a", Spec: &probe.Spec{Kind: "rr", Count: 500}},
	}}, &run)
	if code != http.StatusCreated || len(run.Tasks) != 2 {
		t.Fatalf("create run: %d %+v", code, run)
	}
	deadline := time.Now().Add(60 * time.Second)
	for run.State == api.RunRunning {
		if time.Now().After(deadline) {
			t.Fatalf("run still running after 60s: %+v", run.Counts)
		}
		time.Sleep(100 * time.Millisecond)
		user.call("GET", "/api/v2/runs/"+run.ID, nil, &run)
	}
	if run.State != api.RunSucceeded {
		for _, tk := range run.Tasks {
			t.Errorf("task %s %s: %s %q", tk.TaskID, tk.Spec, tk.State, tk.Reason)
		}
		t.Fatalf("run ended %s", run.State)
	}
	for _, tk := range run.Tasks {
		var res probe.Result
		if err := json.Unmarshal(tk.Result, &res); err != nil {
			t.Fatalf("result of %s: %v", tk.TaskID, err)
		}
		switch res.Kind {
		case probe.KindTCP:
			if res.ThroughputBps == nil || res.ThroughputBps.Receiver <= 0 {
				t.Errorf("tcp result without a received throughput: %s", tk.Result)
			}
		case probe.KindRR:
			if res.RTTms == nil || res.RTTms.Count < 100 || res.RTTms.Avg <= 0 {
				t.Errorf("rr result without RTTs: %s", tk.Result)
			}
		default:
			t.Errorf("unexpected result kind %q", res.Kind)
		}
		if tk.SrcPodIP == tk.DstPodIP {
			t.Errorf("task %s from %s to itself", tk.TaskID, tk.SrcPodIP)
		}
	}

	// 5. One renderer: a suite run as `cnperf run` prints it at the end is
	// what `cnperf report` prints for the stored run, in every format; a
	// v2 task run with tcp, udp, rr and ping results reads the same from
	// `cnperf report` and the dashboard's downloads.
	cnperf := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "CNPERF_SERVER=", "CNPERF_TOKEN=", "CNPERF_USER_TOKEN=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	runCSV, errOut, err := cnperf("run", "baseline", "--server", base, "--token", "u-e2e", "--time", "300ms", "--repeat", "1",
		"--set", "ping-count=3", "--set", "udp-rate=50M", "--csv")
	if err != nil {
		t.Fatalf("cnperf run baseline --csv: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(runCSV), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "run_id,suite,backend,connection") {
		t.Fatalf("cnperf run --csv printed:\n%s", runCSV)
	}
	runID, _, _ := strings.Cut(lines[1], ",")
	report := func(id, format string) string {
		t.Helper()
		file := filepath.Join(dir, "report."+format)
		out, errOut, err := cnperf("report", id, "--server", base, "--token", "u-e2e", "--format", format, "--output", file)
		if err != nil {
			t.Fatalf("cnperf report %s --format %s: %v\n%s%s", id, format, err, out, errOut)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if reportCSV := report(runID, "csv"); reportCSV != runCSV {
		t.Errorf("cnperf run --csv and cnperf report --format csv differ:\n%s\n---\n%s", runCSV, reportCSV)
	}
	for _, f := range []struct{ flag, format, says string }{{"--json", "json", `"run_ids"`}, {"--markdown", "md", "### backend not named"}, {"", "text", "VS NODE-NODE"}} {
		args := []string{"run", "baseline", "--server", base, "--token", "u-e2e", "--time", "300ms", "--repeat", "1", "--set", "ping-count=3", "--set", "udp-rate=50M"}
		if f.flag != "" {
			args = append(args, f.flag)
		}
		printed, errOut, err := cnperf(args...)
		if err != nil {
			t.Fatalf("cnperf run baseline %s: %v\n%s", f.flag, err, errOut)
		}
		ids, err := runIDsOf(printed, f.format)
		if err != nil {
			t.Fatalf("cnperf run baseline %s: %v\n%s", f.flag, err, printed)
		}
		if stored := report(ids, f.format); stored != printed || !strings.Contains(printed, f.says) {
			t.Errorf("cnperf run %s and cnperf report --format %s differ (or lack %q):\n%s\n---\n%s", f.flag, f.format, f.says, printed, stored)
		}
	}
	rate := uint64(20e6)
	var kinds api.Run
	if code := user.call("POST", "/api/v2/runs", api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(300 * time.Millisecond)}},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "udp", Duration: probe.Duration(300 * time.Millisecond), RateBps: &rate}},
		{Src: "pod-b", Dst: "pod-a", Spec: &probe.Spec{Kind: "rr", Count: 200}},
		{Src: "pod-b", Dst: "pod-a", Spec: &probe.Spec{Kind: "ping", Count: 3, Interval: probe.Duration(100 * time.Millisecond)}},
	}}, &kinds); code != http.StatusCreated {
		t.Fatalf("create the tcp, udp, rr and ping run: %d", code)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		user.call("GET", "/api/v2/runs/"+kinds.ID, nil, &kinds)
		if kinds.State != api.RunRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run still running after 60s: %+v", kinds.Counts)
		}
	}
	for _, format := range []string{"text", "md", "csv", "json", "html"} {
		stored := report(kinds.ID, format)
		req, _ := http.NewRequest(http.MethodGet, base+"/runs/"+kinds.ID+"/report?format="+format, nil)
		req.Header.Set("Authorization", "Bearer u-e2e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(page) != stored {
			t.Errorf("the dashboard's %s (%d) and cnperf report --format %s differ:\n%s\n---\n%s", format, resp.StatusCode, format, page, stored)
		}
	}
	if text := report(kinds.ID, "text"); !strings.Contains(text, "UDP throughput, receiver") || !strings.Contains(text, "Ping RTT avg") ||
		!strings.Contains(text, "RR round trip p50") || strings.Contains(text, "latency ms") {
		t.Errorf("the task run's report does not label its results by kind:\n%s", text)
	}

	// 6. Identity: each agent joined once and keeps its credential in
	// --state-dir/token (one line, 0600); restarted, it uses it without
	// joining again; revoked, it is refused.
	if !strings.Contains(a.out.String(), "agent joined the server") {
		t.Errorf("agent a did not log its join")
	}
	tokFile := filepath.Join(dir, "pod-a", "token")
	fi, err := os.Stat(tokFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v, %v; want mode 0600", fi, err)
	}
	tok, _ := os.ReadFile(tokFile)
	if !strings.HasPrefix(string(tok), api.CredentialPrefix) || strings.Count(string(tok), "\n") != 1 {
		t.Errorf("credential file holds %d bytes, not one line with a credential", len(tok))
	}
	a.stop(t, 15*time.Second)
	a2 := agent("pod-a", "127.0.0.2")
	a2.waitFor(t, "agent ready", 20*time.Second)
	if strings.Contains(a2.out.String(), "agent joined") {
		t.Errorf("restarted agent joined again instead of using its credential")
	}
	out, errOut, err := cnperf("agents", "revoke", "uid-pod-a", "--server", base, "--token", "u-e2e")
	if err != nil || !strings.Contains(out, "revoked the credential of agent uid-pod-a") {
		t.Fatalf("cnperf agents revoke: %v %s %s", err, out, errOut)
	}
	a2.waitFor(t, "unknown or revoked agent credential", 10*time.Second)

	// 7. SIGTERM: every process ends cleanly and promptly.
	a2.stop(t, 15*time.Second)
	b.stop(t, 15*time.Second)
	srv.stop(t, 15*time.Second)
	for _, p := range []*proc{a, a2, b, srv} {
		if n := countLines(p.out.String(), "level=ERROR"); n > 0 {
			t.Errorf("%s logged %d errors:\n%s", p.name, n, p.out.String())
		}
	}
	if !strings.Contains(a2.out.String(), "agent stopped") || !strings.Contains(srv.out.String(), "server stopped") {
		t.Errorf("no clean stop logged")
	}
}

func countLines(s, sub string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			n++
		}
	}
	return n
}

// runIDsOf reads the run id from what `cnperf run` printed: JSON's
// run_id, or the title line of text ("run ID · ...") and Markdown.
func runIDsOf(printed, format string) (string, error) {
	if format == "json" {
		var doc struct {
			RunID string `json:"run_id"`
		}
		if err := json.Unmarshal([]byte(printed), &doc); err != nil || doc.RunID == "" {
			return "", fmt.Errorf("no run_id: %v", err)
		}
		return doc.RunID, nil
	}
	first, _, _ := strings.Cut(printed, "\n")
	_, after, ok := strings.Cut(first, "run ")
	id, _, ok2 := strings.Cut(after, " ")
	if !ok || !ok2 || id == "" {
		return "", fmt.Errorf("no run id in %q", first)
	}
	return id, nil
}
