package certs

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEnsureServer: the first call makes a CA and a serving certificate
// (keys owner-only); the next keeps both (same CA fingerprint); new names
// issue a new certificate under the same CA; a client trusting ca.crt
// verifies the server, one trusting nothing does not.
func TestEnsureServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	hosts := []string{"localhost", "127.0.0.1"}
	first, err := EnsureServer(dir, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	if !first.MadeCA || !first.Issued || len(first.CASHA256) != 95 {
		t.Fatalf("first start: %+v, want a new CA and certificate with a SHA-256 fingerprint", first)
	}
	for _, p := range []string{first.CAKey, first.Key} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", p, fi, err)
		}
	}
	again, err := EnsureServer(dir, hosts, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if again.MadeCA || again.Issued || again.CASHA256 != first.CASHA256 {
		t.Errorf("second start: %+v, want the kept CA (%s) and certificate", again, first.CASHA256)
	}
	renamed, err := EnsureServer(dir, append(hosts, "cnperf.example"), now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if renamed.MadeCA || !renamed.Issued || renamed.CASHA256 != first.CASHA256 || renamed.Why == "" {
		t.Errorf("new names: %+v, want a new certificate (with the reason) under the same CA", renamed)
	}

	cfg, err := ServerConfig(renamed.Cert, renamed.Key)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	ts.TLS = cfg
	ts.StartTLS()
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	ccfg, err := ClientConfig(renamed.CA)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ccfg}, Timeout: 10 * time.Second}
	resp, err := hc.Get("https://localhost:" + port + "/")
	if err != nil {
		t.Fatalf("client trusting ca.crt: %v", err)
	}
	resp.Body.Close()
	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}, Timeout: 10 * time.Second}
	if resp, err := untrusting.Get("https://localhost:" + port + "/"); err == nil {
		resp.Body.Close()
		t.Error("a client without the CA verified the self-signed server")
	}
}
