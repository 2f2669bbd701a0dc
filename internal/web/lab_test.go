package web_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/certs"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/lab"
)

// TestMain removes the cnperf binary the end-to-end tests built.
func TestMain(m *testing.M) { cnperftest.Main(m) }

// newLabCluster builds a lab (2 nodes, 2 pods each, host-gw) with its
// cnperf server and agents (one per pod, one host-network agent per node),
// and serves the lab's server to this namespace through a reverse proxy on
// loopback, so a browser here reaches the dashboard. It skips without
// root. Everything is removed in t.Cleanup.
func newLabCluster(t *testing.T) *cluster {
	t.Helper()
	return newLabClusterSized(t, 2, 2)
}

// newLabClusterSized is newLabCluster with nodes x podsPerNode pods.
func newLabClusterSized(t *testing.T, nodes, podsPerNode int) *cluster {
	t.Helper()
	if err := lab.CheckPrivileges(); err != nil {
		t.Skipf("no lab: %v", err)
	}
	bin := cnperftest.Binary(t)
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	name := "rw" + hex.EncodeToString(rb[:])
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: nodes, PodsPerNode: podsPerNode, Backend: lab.BackendHostGW, StateDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := l.Down(dctx); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	cp, err := l.StartCnperf(ctx, lab.CnperfOptions{Binary: bin, HostAgents: true, LogLevel: "warn"})
	if err != nil {
		t.Fatalf("start cnperf in the lab: %v", err)
	}
	t.Logf("lab %s: %d agents online after %v", name, cp.Agents, cp.Elapsed.Round(time.Millisecond))
	target, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	ns := l.Underlay.NS
	proxy := httputil.NewSingleHostReverseProxy(target)
	tlsCfg, err := certs.ClientConfig(cp.CAFile) // the lab's server serves HTTPS
	if err != nil {
		t.Fatal(err)
	}
	// The proxy serves the test's clients plain HTTP on loopback: the
	// session cookie the server marks Secure (it is reached over TLS)
	// would not come back over it.
	proxy.ModifyResponse = func(resp *http.Response) error {
		for i, c := range resp.Header["Set-Cookie"] {
			resp.Header["Set-Cookie"][i] = strings.ReplaceAll(c, "; Secure", "")
		}
		return nil
	}
	proxy.Transport = &http.Transport{TLSClientConfig: tlsCfg, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := lab.Do(ns, func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	ts := httptest.NewServer(proxy)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, cp.UserToken, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{URL: ts.URL, API: c, Token: cp.UserToken, Where: "lab " + name}
	cl.waitAgents(t, cp.Agents)
	return cl
}

// TestLabOverviewScale is issue 12 part 5: a 32x4 lab with the real
// server and 160 agents (128 pods, 32 host-network agents) comes up with
// every agent online, and the dashboard's overview renders all of them,
// by node. How fast they come up is bench-lab's figure (make bench-lab),
// not asserted here.
func TestLabOverviewScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a 32x4 lab: not in -short")
	}
	const nodes, pods = 32, 4
	cl := newLabClusterSized(t, nodes, pods)
	as, err := cl.API.Agents(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != nodes*(pods+1) {
		t.Fatalf("%d agents online, want %d", len(as), nodes*(pods+1))
	}
	req, _ := http.NewRequest(http.MethodGet, cl.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer "+cl.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview: %d\n%s", resp.StatusCode, excerpt(string(body)))
	}
	page := string(body)
	if n := strings.Count(page, `<tr class="agent" data-status="free">`); n != nodes*(pods+1) {
		t.Errorf("%d free agents on the overview, want %d", n, nodes*(pods+1))
	}
	want := []string{fmt.Sprintf("%d</b> online of %d agents on %d nodes", nodes*(pods+1), nodes*(pods+1), nodes)}
	for n := 1; n <= nodes; n++ {
		want = append(want, fmt.Sprintf(`data-node="n%d"`, n), ">"+lab.HostAgentName(fmt.Sprintf("n%d", n))+"<")
		for p := 1; p <= pods; p++ {
			want = append(want, fmt.Sprintf(">n%d-p%d<", n, p))
		}
	}
	for _, w := range want {
		if !strings.Contains(page, w) {
			t.Errorf("overview lacks %q", w)
		}
	}
	t.Logf("overview of %d agents: %d bytes", len(as), len(body))
}
