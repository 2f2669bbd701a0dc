package e2e_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/certs"
	"github.com/cnperf/cnperf/internal/cnperftest"
)

// TestTLSEndToEnd: `cnperf server --tls-cert --tls-key` serves HTTPS; an
// agent and the CLI given --ca-file verify it and work; the CLI without
// the CA (the system pool) refuses the server's certificate.
func TestTLSEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dir := t.TempDir()
	files, err := certs.WriteServer(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bin := cnperftest.Binary(t)
	addr := freeAddr(t)
	base := "https://" + addr
	srv := start(t, "server", bin, []string{"CNPERF_USER_TOKEN=u-tls", "CNPERF_AGENT_TOKEN=a-tls"},
		"server", "--listen", addr, "--db", "sqlite:"+filepath.Join(dir, "cnperf.db"), "--tls-cert", files.Cert, "--tls-key", files.Key)
	srv.waitFor(t, "scheme=https", 20*time.Second)
	env := []string{"CNPERF_AGENT_TOKEN=a-tls", "POD_NAME=pod-tls", "POD_NAMESPACE=e2e", "POD_UID=uid-tls",
		"POD_IP=127.0.0.1", "NODE_NAME=node-tls", "NODE_IP=127.0.0.1"} // its heartbeats come from 127.0.0.1
	agent := start(t, "agent", bin, env, "agent", "--server", base, "--ca-file", files.CA, "--responder-port", "0", "--state-dir", t.TempDir())
	agent.waitFor(t, "agent ready", 20*time.Second)

	clients := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"clients", "--server", base, "--token", "u-tls"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := clients("--ca-file", files.CA)
	if err != nil || !strings.Contains(out, "pod-tls") {
		t.Fatalf("clients with --ca-file: %v\n%s", err, out)
	}
	out, err = clients()
	if err == nil || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Fatalf("clients without the CA: %v\n%s; want a refused certificate", err, out)
	}
	agent.stop(t, 10*time.Second)
	srv.stop(t, 15*time.Second)
}
