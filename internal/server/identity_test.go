package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestAgentIdentity is issue #11's check outside Kubernetes: agents A and
// B join and get credentials of their own; B's credential cannot
// heartbeat, fetch, start or report for A, nor can the join token once A
// has joined (403 each time, JSON error, statuses logged); A's task
// result is A's; a revoked credential is 401, and the join token cannot
// join the revoked uid again (nor act for it) until an admin forgets it.
func TestAgentIdentity(t *testing.T) { storetest.ForEach(t, testAgentIdentity) }

func testAgentIdentity(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	join := func(uid string) (string, *client.Client) {
		t.Helper()
		jr, err := f.agent.Join(ctx, uid)
		if err != nil {
			t.Fatalf("join %s: %v", uid, err)
		}
		if !strings.HasPrefix(jr.Token, api.CredentialPrefix) || jr.PodUID != uid {
			t.Fatalf("join %s answered %+v", uid, jr)
		}
		return jr.Token, f.agent.WithToken(jr.Token)
	}
	credA, a := join("uid-a")
	credB, b := join("uid-b")
	for _, c := range []struct {
		cl                  *client.Client
		uid, name, ip, node string
	}{{a, "uid-a", "pod-a", "10.244.1.12", "node-1"}, {b, "uid-b", "pod-b", "10.244.2.7", "node-2"}} {
		if _, err := c.cl.Heartbeat(ctx, api.Heartbeat{PodUID: c.uid, PodName: c.name, PodIP: c.ip, NodeName: c.node, ResponderAddr: c.ip + ":5201"}); err != nil {
			t.Fatalf("own heartbeat of %s: %v", c.uid, err)
		}
	}
	// The store keeps hashes only.
	if c, err := f.st.GetCredential(ctx, "uid-a"); err != nil || c.Hash == credA || c.Hash != hashCredential(credA) {
		t.Fatalf("stored credential of uid-a: %+v, %v; want its SHA-256 only", c, err)
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	task := ids[0]
	fa, err := a.Fetch(ctx, "uid-a", 0)
	if err != nil || len(fa.Tasks) != 1 || fa.Tasks[0].TaskID != task {
		t.Fatalf("A fetches its task: %+v, %v", fa, err)
	}

	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	hbA := js(api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.99.99.99", NodeName: "node-1", ResponderAddr: "10.99.99.99:22", BootID: "forged"})
	forged := func(uid string) []byte {
		return js(api.Report{TaskID: task, PodUID: uid, ReportID: "forged-" + uid, State: api.StateSucceeded, TaskResult: "forged"})
	}
	attacks := []struct {
		name, method, path, token string
		body                      []byte
	}{
		{"B heartbeats as A (v2)", "POST", "/api/v2/agent/heartbeat", credB, hbA},
		{"B heartbeats as A (v1)", "POST", "/api/v1/internal/heartbeat", credB, hbA},
		{"B fetches A's tasks (v2)", "GET", "/api/v2/agent/tasks?pod_uid=uid-a", credB, nil},
		{"B fetches A's tasks (v1)", "GET", "/api/v1/internal/get_tasks?pod_uid=uid-a", credB, nil},
		{"B starts A's task as A", "POST", "/api/v2/agent/tasks/" + task + "/start", credB, js(api.StartRequest{PodUID: "uid-a"})},
		{"B starts A's task as B", "POST", "/api/v2/agent/tasks/" + task + "/start", credB, js(api.StartRequest{PodUID: "uid-b"})},
		{"B reports A's task as A (v2)", "POST", "/api/v2/agent/tasks/" + task + "/report", credB, forged("uid-a")},
		{"B reports A's task as B (v2)", "POST", "/api/v2/agent/tasks/" + task + "/report", credB, forged("uid-b")},
		{"B reports A's task as A (v1)", "POST", "/api/v1/internal/report_task", credB, forged("uid-a")},
		{"B serves A's side of the task", "POST", "/api/v2/agent/tasks/" + task + "/serving", credB, js(api.Serving{PodUID: "uid-a", Port: 5999})},
		{"join token heartbeats as A (v2)", "POST", "/api/v2/agent/heartbeat", agentTok, hbA},
		{"join token heartbeats as A (v1)", "POST", "/api/v1/internal/heartbeat", agentTok, hbA},
		{"join token fetches A's tasks (v2)", "GET", "/api/v2/agent/tasks?pod_uid=uid-a", agentTok, nil},
		{"join token fetches A's tasks (v1)", "GET", "/api/v1/internal/get_tasks?pod_uid=uid-a", agentTok, nil},
		{"join token starts A's task", "POST", "/api/v2/agent/tasks/" + task + "/start", agentTok, js(api.StartRequest{PodUID: "uid-a"})},
		{"join token reports A's task (v2)", "POST", "/api/v2/agent/tasks/" + task + "/report", agentTok, forged("uid-a")},
		{"join token reports A's task (v1)", "POST", "/api/v1/internal/report_task", agentTok, forged("uid-a")},
		{"join token joins A again", "POST", "/api/v2/agent/join", agentTok, js(api.JoinRequest{PodUID: "uid-a"})},
		{"A's credential joins", "POST", "/api/v2/agent/join", credA, js(api.JoinRequest{PodUID: "uid-c"})},
	}
	for _, at := range attacks {
		status, body := f.do(at.method, at.path, at.token, at.body)
		var eb struct {
			Error, Msg string
		}
		_ = json.Unmarshal(body, &eb)
		t.Logf("%-36s %s %s -> %d %s", at.name, at.method, at.path, status, strings.TrimSpace(eb.Error+eb.Msg))
		if status != http.StatusForbidden || eb.Error+eb.Msg == "" {
			t.Errorf("%s: %d %s, want 403 with a JSON error", at.name, status, body)
		}
	}
	// Nothing of the forgeries stuck: A's identity, its boot and its task.
	if got, _ := f.st.GetAgent(ctx, "uid-a"); got.PodIP != "10.244.1.12" || got.ResponderAddr != "10.244.1.12:5201" {
		t.Errorf("agent A after the attacks: ip %s responder %s", got.PodIP, got.ResponderAddr)
	}
	if got, _ := f.st.GetTask(ctx, task); got.State != store.TaskDispatched {
		t.Fatalf("A's task after the attacks: %s (%s)", got.State, got.Reason)
	}
	// A's own calls go through, and the result is A's.
	if err := a.Start(ctx, task, "uid-a"); err != nil {
		t.Fatalf("A starts its task: %v", err)
	}
	rr, err := a.Report(ctx, api.Report{TaskID: task, PodUID: "uid-a", ReportID: "a-1", State: api.StateSucceeded, TaskResult: "A's output"})
	if err != nil || rr.Duplicate {
		t.Fatalf("A reports: %+v, %v", rr, err)
	}
	got, err := f.user.Task(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := f.st.GetTask(ctx, task)
	t.Logf("task %s: TaskStatus %d, TaskResult %q, report_id %s", task, got.TaskStatus, got.TaskResult, stored.ReportID)
	if got.TaskResult != "A's output" || stored.ReportID != "a-1" || stored.State != store.TaskSucceeded {
		t.Errorf("A's task holds %q (report %s, %s), want A's output", got.TaskResult, stored.ReportID, stored.State)
	}

	// Revocation: A's credential is refused at once; A may join again.
	if _, err := f.agent.RevokeAgent(ctx, "uid-a"); api.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("revoke with the join token: %v, want 401", err)
	}
	if rv, err := f.user.RevokeAgent(ctx, "uid-a"); err != nil || rv.PodUID != "uid-a" {
		t.Fatalf("revoke A: %+v, %v", rv, err)
	}
	if _, err := f.user.RevokeAgent(ctx, "uid-a"); api.StatusOf(err) != http.StatusNotFound {
		t.Errorf("revoke A twice: %v, want 404", err)
	}
	_, err = a.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1"})
	t.Logf("A's revoked credential heartbeats -> %d %v", api.StatusOf(err), err)
	if api.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("revoked credential: %v, want 401", err)
	}
	// The join token cannot bring the revoked agent back.
	status, body := f.do("POST", "/api/v2/agent/join", agentTok, js(api.JoinRequest{PodUID: "uid-a"}))
	t.Logf("join token joins revoked A -> %d %s", status, strings.TrimSpace(string(body)))
	if status != http.StatusForbidden || !strings.Contains(string(body), "revoked") {
		t.Errorf("join of revoked A: %d %s, want 403 naming the revocation", status, body)
	}
	if status, body := f.do("POST", "/api/v2/agent/heartbeat", agentTok, js(api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1"})); status != http.StatusForbidden {
		t.Errorf("join token heartbeats as revoked A: %d %s, want 403", status, body)
	}
	if err := f.agent.ForgetAgent(ctx, "uid-a"); api.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("forget with the join token: %v, want 401", err)
	}
	if err := f.user.ForgetAgent(ctx, "uid-a"); err != nil {
		t.Fatalf("forget A: %v", err)
	}
	_, a2 := join("uid-a")
	if _, err := a2.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1"}); err != nil {
		t.Errorf("A's new credential: %v", err)
	}
}

// TestReviewedPodBeatsSquatter: on a server with both a join token and
// TokenReview, a join-token holder that joins a pod's uid before the pod
// does loses it the moment the pod shows its reviewed ServiceAccount
// token: the squatter's credential is revoked (401), the pod's calls go
// through, and the join token can neither join the uid again nor act for
// it.
func TestReviewedPodBeatsSquatter(t *testing.T) {
	st := openSQLite(t)
	rev := fakeReviewer{"sa.k.x": {PodUID: "uid-k", PodName: "cnperf-agent-k", Username: "system:serviceaccount:cnperf:cnperf-agent"}}
	srv, err := New(Options{Store: st, UserToken: userTok, AgentToken: agentTok, AgentReviewer: rev,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	f := &fixture{t: t, ts: ts}
	hb := []byte(`{"pod_uid":"uid-k","pod_name":"cnperf-agent-k","pod_ip":"10.244.1.5","node_name":"node-1"}`)
	status, body := f.do("POST", "/api/v2/agent/join", agentTok, []byte(`{"pod_uid":"uid-k"}`))
	if status != http.StatusOK {
		t.Fatalf("squatter joins uid-k: %d %s", status, body)
	}
	var jr api.JoinReply
	if err := json.Unmarshal(body, &jr); err != nil {
		t.Fatal(err)
	}
	if status, body := f.do("POST", "/api/v2/agent/heartbeat", jr.Token, hb); status != http.StatusOK {
		t.Fatalf("squatter's heartbeat before the pod shows up: %d %s", status, body)
	}
	if status, body := f.do("POST", "/api/v2/agent/heartbeat", "sa.k.x", hb); status != http.StatusOK {
		t.Fatalf("the reviewed pod's heartbeat: %d %s, want 200", status, body)
	}
	steps := []struct {
		name, path, token string
		body              []byte
		want              int
	}{
		{"squatter's credential", "/api/v2/agent/heartbeat", jr.Token, hb, http.StatusUnauthorized},
		{"join token joins uid-k", "/api/v2/agent/join", agentTok, []byte(`{"pod_uid":"uid-k"}`), http.StatusForbidden},
		{"join token acts for uid-k", "/api/v2/agent/heartbeat", agentTok, hb, http.StatusForbidden},
		{"the pod again", "/api/v2/agent/heartbeat", "sa.k.x", hb, http.StatusOK},
	}
	for _, s := range steps {
		status, body := f.do("POST", s.path, s.token, s.body)
		t.Logf("%-26s -> %d %s", s.name, status, strings.TrimSpace(string(body)))
		if status != s.want {
			t.Errorf("%s: %d %s, want %d", s.name, status, body, s.want)
		}
	}
	if c, err := st.GetCredential(context.Background(), "uid-k"); err != nil || c.RevokedAt == nil {
		t.Errorf("squatter's credential after the pod showed up: %+v, %v; want revoked", c, err)
	}
}

// TestJoinTokenScope: by default the join token still acts for a uid that
// never joined (a seed v1 agent); with RequireAgentCredentials it only
// joins. A made-up credential is 401.
func TestJoinTokenScope(t *testing.T) {
	cases := []struct {
		name    string
		require bool
		want    int
	}{
		{"seed agent, default", false, http.StatusOK},
		{"seed agent, credentials required", true, http.StatusForbidden},
	}
	hb := []byte(`{"pod_uid":"uid-seed","pod_name":"pod-seed","pod_ip":"10.244.1.5","node_name":"node-1"}`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
			f.srv.opts.RequireAgentCredentials = c.require
			for _, path := range []string{"/api/v1/internal/heartbeat", "/api/v2/agent/heartbeat"} {
				if status, body := f.do("POST", path, agentTok, hb); status != c.want {
					t.Errorf("%s: %d %s, want %d", path, status, body, c.want)
				}
			}
			if status, body := f.do("POST", "/api/v2/agent/heartbeat", api.CredentialPrefix+"made-up", hb); status != http.StatusUnauthorized {
				t.Errorf("made-up credential: %d %s, want 401", status, body)
			}
		})
	}
}

// fakeReviewer stands for TokenReview: it knows tokens by value.
type fakeReviewer map[string]ReviewedAgent

func (f fakeReviewer) Review(_ context.Context, tok string) (ReviewedAgent, error) {
	if tok == "api.down.x" {
		return ReviewedAgent{}, errors.New("connection refused")
	}
	a, ok := f[tok]
	if !ok {
		return ReviewedAgent{}, fmt.Errorf("%w: token of system:serviceaccount:cnperf:intruder, not of an agent's service account", ErrTokenRefused)
	}
	return a, nil
}

// TestServiceAccountAgents: with an AgentReviewer and no join token, a
// reviewed token speaks for its own pod (uid and name from the token's
// bound claims) and no other; a refused token is 401, a failed review 503.
func TestServiceAccountAgents(t *testing.T) {
	st := openSQLite(t)
	rev := fakeReviewer{"sa.k.x": {PodUID: "uid-k", PodName: "cnperf-agent-k", Username: "system:serviceaccount:cnperf:cnperf-agent"}}
	srv, err := New(Options{Store: st, UserToken: userTok, AgentReviewer: rev})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	f := &fixture{t: t, ts: ts}
	hb := func(uid, name string) []byte {
		return []byte(fmt.Sprintf(`{"pod_uid":%q,"pod_name":%q,"pod_ip":"10.244.1.5","node_name":"node-1"}`, uid, name))
	}
	cases := []struct {
		name, token string
		body        []byte
		want        int
	}{
		{"own pod", "sa.k.x", hb("uid-k", "cnperf-agent-k"), http.StatusOK},
		{"another uid", "sa.k.x", hb("uid-a", "cnperf-agent-k"), http.StatusForbidden},
		{"another pod name", "sa.k.x", hb("uid-k", "cnperf-agent-a"), http.StatusForbidden},
		{"another service account", "sa.intruder.x", hb("uid-k", "cnperf-agent-k"), http.StatusUnauthorized},
		{"review fails", "api.down.x", hb("uid-k", "cnperf-agent-k"), http.StatusServiceUnavailable},
		{"no token", "", hb("uid-k", "cnperf-agent-k"), http.StatusUnauthorized},
		{"not a JWT (no review)", "agent-secret", hb("uid-k", "cnperf-agent-k"), http.StatusUnauthorized},
	}
	for _, c := range cases {
		status, body := f.do("POST", "/api/v2/agent/heartbeat", c.token, c.body)
		t.Logf("%-24s -> %d %s", c.name, status, strings.TrimSpace(string(body)))
		if status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.want)
		}
	}
	if status, _ := f.do("POST", "/api/v2/agent/join", "sa.k.x", []byte(`{"pod_uid":"uid-k"}`)); status != http.StatusForbidden {
		t.Errorf("join with a ServiceAccount token: %d, want 403", status)
	}
}

// TestAgentAdvertisesOwnAddrs: an agent's responder address must be its
// own pod or node address (not any host:port whose reachability the
// task's error would tell); with AgentSourceCheck the heartbeat must also
// come from one of the two (here 127.0.0.1, the test's source).
func TestAgentAdvertisesOwnAddrs(t *testing.T) {
	hb := func(podIP, nodeIP, resp string) []byte {
		return []byte(fmt.Sprintf(`{"pod_uid":"uid-a","pod_name":"pod-a","pod_ip":%q,"node_ip":%q,"node_name":"node-1","responder_addr":%q}`, podIP, nodeIP, resp))
	}
	cases := []struct {
		name  string
		check bool
		body  []byte
		want  int
	}{
		{"responder on the pod ip", false, hb("10.244.1.12", "10.170.0.10", "10.244.1.12:5201"), http.StatusOK},
		{"responder on the node ip", false, hb("10.244.1.12", "10.170.0.10", "10.170.0.10:5201"), http.StatusOK},
		{"responder on another host", false, hb("10.244.1.12", "10.170.0.10", "10.99.99.99:22"), http.StatusBadRequest},
		{"responder by name", false, hb("10.244.1.12", "10.170.0.10", "db.internal:5432"), http.StatusBadRequest},
		{"source is the pod ip", true, hb("127.0.0.1", "", "127.0.0.1:5201"), http.StatusOK},
		{"source is the node ip (NAT)", true, hb("10.244.1.12", "127.0.0.1", "10.244.1.12:5201"), http.StatusOK},
		{"source is neither", true, hb("10.244.1.12", "10.170.0.10", "10.244.1.12:5201"), http.StatusForbidden},
		{"source is neither, no responder", true, hb("10.244.1.12", "", ""), http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
			f.srv.opts.AgentSourceCheck = c.check
			for _, path := range []string{"/api/v1/internal/heartbeat", "/api/v2/agent/heartbeat"} {
				status, body := f.do("POST", path, agentTok, c.body)
				t.Logf("%s -> %d %s", path, status, strings.TrimSpace(string(body)))
				if status != c.want {
					t.Errorf("%s: %d %s, want %d", path, status, body, c.want)
				}
			}
			if c.want != http.StatusOK {
				if a, err := f.st.GetAgent(context.Background(), "uid-a"); err == nil {
					t.Errorf("a refused heartbeat registered the agent: %+v", a)
				}
			}
		})
	}
}
