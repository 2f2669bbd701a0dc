package e2e_test

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/certs"
	"github.com/cnperf/cnperf/internal/cnperftest"
)

// TestServerTLSByDefault runs `cnperf server` with no TLS flags, as a user
// would: it serves HTTPS with a CA it made on its first start (logged with
// its fingerprint, kept beside the SQLite database), which a client
// trusting that CA file verifies and one trusting nothing does not; plain
// HTTP is refused. An agent given --ca-file and its own address joins; one
// advertising an address its heartbeats do not come from is refused. A
// second server on the same database is refused, naming the first one's
// pid. Restarted, the server keeps its CA; --plain-http is the opt-in.
func TestServerTLSByDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	db := "sqlite:" + filepath.Join(dir, "cnperf.db")
	env := []string{"CNPERF_USER_TOKEN=u-tls", "CNPERF_AGENT_TOKEN=a-tls", "CNPERF_CA_FILE=", "CNPERF_PLAIN_HTTP=", "CNPERF_TLS_DIR="}
	// --check-agent-source: the agent below that sends from another
	// address than it advertises is refused (off by default).
	srv := start(t, "server", bin, env, "server", "--listen", addr, "--db", db, "--check-agent-source")
	srv.waitFor(t, "server listening", 20*time.Second)
	out := srv.out.String()
	fp := regexp.MustCompile(`made a CA .*ca_sha256=([0-9A-F:]{95})`).FindStringSubmatch(out)
	if fp == nil || !strings.Contains(out, "scheme=https") {
		t.Fatalf("first start did not log a new CA with its fingerprint and https:\n%s", out)
	}
	caFile := filepath.Join(dir, "cnperf-tls", "ca.crt")
	if _, err := os.Stat(caFile); err != nil {
		t.Fatalf("the CA is not kept beside the database: %v", err)
	}

	cfg, err := certs.ClientConfig(caFile)
	if err != nil {
		t.Fatal(err)
	}
	get := func(hc *http.Client, url string) (int, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if st, err := get(trusting, "https://"+host+":"+port+"/healthz"); err != nil || st != http.StatusOK {
			t.Errorf("https://%s with the CA file: %d, %v; want 200", host, st, err)
		}
	}
	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}, Timeout: 10 * time.Second}
	if _, err := get(untrusting, "https://"+addr+"/healthz"); err == nil {
		t.Error("a client without the CA verified the server")
	}
	if st, err := get(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/healthz"); err == nil && st == http.StatusOK {
		t.Error("plain HTTP was served by default")
	}

	// Agents verify with the CA file; the server takes heartbeats only
	// from the addresses an agent advertises.
	agent := func(name, ip string) *proc {
		env := []string{"CNPERF_AGENT_TOKEN=a-tls", "POD_NAME=" + name, "POD_NAMESPACE=e2e", "POD_UID=uid-" + name, "POD_IP=" + ip, "NODE_NAME=node-1", "NODE_IP=" + ip}
		return start(t, name, bin, env, "agent", "--server", "https://"+addr, "--ca-file", caFile, "--responder-port", "0",
			"--state-dir", filepath.Join(dir, name))
	}
	own := agent("pod-own", "127.0.0.1")
	own.waitFor(t, "agent ready", 20*time.Second)
	other := agent("pod-elsewhere", "127.0.0.9")
	other.waitFor(t, "neither its pod_ip (127.0.0.9)", 20*time.Second)
	own.stop(t, 15*time.Second)
	other.stop(t, 15*time.Second)

	// A second server on the same SQLite file is refused.
	second := start(t, "second", bin, env, "server", "--listen", freeAddr(t), "--db", db, "--plain-http")
	select {
	case <-second.done:
	case <-time.After(20 * time.Second):
		t.Fatal("a second server on the same SQLite file is still running")
	}
	want := "in use by another process (pid " + strconv.Itoa(srv.cmd.Process.Pid)
	if second.err == nil || !strings.Contains(second.out.String(), want) {
		t.Errorf("second server: %v, output %q; want a failure naming %q", second.err, second.out.String(), want)
	}

	srv.stop(t, 15*time.Second)
	again := start(t, "server-again", bin, env, "server", "--listen", addr, "--db", db)
	again.waitFor(t, "server listening", 20*time.Second)
	if !strings.Contains(again.out.String(), "serving TLS with the CA kept") || !strings.Contains(again.out.String(), "ca_sha256="+fp[1]) {
		t.Errorf("restart did not keep the CA %s:\n%s", fp[1], again.out.String())
	}
	again.stop(t, 15*time.Second)

	plain := start(t, "server-plain", bin, env, "server", "--listen", addr, "--db", db, "--plain-http")
	plain.waitFor(t, "server listening", 20*time.Second)
	if st, err := get(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/healthz"); err != nil || st != http.StatusOK {
		t.Errorf("--plain-http: %d, %v; want 200 over HTTP", st, err)
	}
	if !strings.Contains(plain.out.String(), "bearer tokens cross the network in clear") {
		t.Errorf("--plain-http did not warn:\n%s", plain.out.String())
	}
	plain.stop(t, 15*time.Second)
}
