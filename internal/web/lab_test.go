package web_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	if err := lab.CheckPrivileges(); err != nil {
		t.Skipf("no lab: %v", err)
	}
	bin := cnperftest.Binary(t)
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	name := "rw" + hex.EncodeToString(rb[:])
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: 2, PodsPerNode: 2, Backend: lab.BackendHostGW, StateDir: t.TempDir()}, log)
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
