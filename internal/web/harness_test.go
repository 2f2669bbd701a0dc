package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/icmp"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/probe/rr"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udp"
	"github.com/cnperf/cnperf/internal/probe/wirewatch"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

const (
	userToken  = "user-token-for-tests"
	agentToken = "agent-token-for-tests"
)

// cluster is a real cnperf server (SQLite) with agents on loopback that run
// cnperf's own probe engines against real responders.
type cluster struct {
	URL   string
	API   *client.Client
	Token string      // the user token
	Where string      // "loopback" or the lab's name
	St    store.Store // the server's store (loopback only)
}

func probers() *probe.Registry {
	return probe.NewRegistry(tcp.Prober{}, udp.New(), rr.Prober{}, icmp.Ping{}, wirewatch.Prober{})
}

// newCluster starts the server. nodes × podsPerNode pod agents and one
// host-network agent per node start when agents is true.
func newCluster(t *testing.T, nodes, podsPerNode int) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: userToken, AgentToken: agentToken, Probers: probers(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		srv.CloseDashboard()
		wg.Wait()
		ts.Close()
		_ = st.Close()
	})
	c, err := client.New(ts.URL, userToken, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{URL: ts.URL, API: c, Token: userToken, Where: "loopback", St: st}
	for n := 1; n <= nodes; n++ {
		for p := 0; p <= podsPerNode; p++ {
			hb := api.Heartbeat{PodName: fmt.Sprintf("pod-%c", 'a'+p), PodUID: fmt.Sprintf("uid-n%d-p%d", n, p), PodIP: "127.0.0.1",
				NodeName: fmt.Sprintf("node%d", n), NodeIP: "127.0.0.1"}
			if p == podsPerNode {
				hb.PodName, hb.HostNetwork = fmt.Sprintf("host-node%d", n), true
			}
			cl.startAgent(t, ctx, &wg, hb)
		}
	}
	cl.waitAgents(t, nodes*(podsPerNode+1))
	return cl
}

// startAgent runs one loopback agent until ctx ends: a responder, a
// heartbeat every 300 ms, and a fetch loop that runs each task with the
// real probe engines and reports the result.
func (cl *cluster) startAgent(t *testing.T, ctx context.Context, wg *sync.WaitGroup, hb api.Heartbeat) {
	t.Helper()
	hb.ResponderAddr = probetest.Start(t, tcp.Handler{}, udp.NewHandler(), rr.Handler{})
	c, err := client.New(cl.URL, agentToken, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Heartbeat(ctx, hb); err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}
	wg.Go(func() {
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				_, _ = c.Heartbeat(ctx, hb)
			}
		}
	})
	reg := probers()
	wg.Go(func() {
		for ctx.Err() == nil {
			reply, err := c.Fetch(ctx, hb.PodUID, time.Second)
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for _, task := range reply.Tasks {
				rep := api.Report{TaskID: task.TaskID, PodUID: hb.PodUID, ReportID: "r-" + task.TaskID, State: api.StateSucceeded}
				if task.Spec == nil {
					rep.State, rep.Reason = api.StateFailed, "not a probe task"
				} else {
					_ = c.Start(ctx, task.TaskID, hb.PodUID)
					tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					res, err := reg.Run(tctx, *task.Spec, probe.Env{Logger: slog.New(slog.DiscardHandler)})
					cancel()
					if err != nil {
						rep.State, rep.Reason = api.StateFailed, err.Error()
					} else {
						rep.Result, _ = json.Marshal(res)
					}
				}
				if _, err := c.Report(ctx, rep); err != nil && ctx.Err() == nil {
					t.Logf("agent %s: report %s: %v", hb.PodName, task.TaskID, err)
				}
			}
		}
	})
}

func (cl *cluster) waitAgents(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		as, err := cl.API.Agents(context.Background(), false)
		if err == nil && len(as) >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("fewer than %d agents online after 10 s", n)
}

// waitRun polls a run until it ends.
func (cl *cluster) waitRun(t *testing.T, id string, within time.Duration) api.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		run, err := cl.API.GetRun(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if api.TerminalState(run.State) || run.State != api.RunRunning {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %v: %v", id, run.State, within, run.Counts)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// browserlessClient is an HTTP client with a cookie jar that does not
// follow redirects, to see each answer.
func browserlessClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func login(t *testing.T, hc *http.Client, base string) {
	t.Helper()
	resp, err := hc.PostForm(base+"/login", url.Values{"token": {userToken}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: status %d, want 303", resp.StatusCode)
	}
}

func (cl *cluster) agentClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(cl.URL, agentToken)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
