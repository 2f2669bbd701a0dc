package web_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/lab"
)

// cnperfBin is the cnperf binary the lab runs, built once per test binary.
var cnperfBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cnperfBin.dir != "" {
		_ = os.RemoveAll(cnperfBin.dir)
	}
	os.Exit(code)
}

func buildCnperf(t *testing.T) string {
	t.Helper()
	b := &cnperfBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "cnperf-web-bin-"); b.err != nil {
			return
		}
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "cnperf")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, "./cmd/cnperf")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

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
	bin := buildCnperf(t)
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
	proxy.Transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
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
