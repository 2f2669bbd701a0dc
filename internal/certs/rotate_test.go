package certs

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServingProblem: a serving certificate stays while it is the CA's,
// names exactly the wanted hosts and is not about to expire; each other
// case names why it must be issued anew.
func TestServingProblem(t *testing.T) {
	ca, err := NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("another CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"cnperf-server", "cnperf-server.cnperf.svc", "10.250.0.1"}
	cert, key, err := ca.Issue(hosts, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, foreignKey, err := other.Issue(hosts, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := ca.Issue(hosts, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tt := range []struct {
		name      string
		cert, key []byte
		hosts     []string
		at        time.Time
		want      string // substring of the problem; "" none
	}{
		{"fits", cert, key, hosts, now, ""},
		{"same hosts in another order", cert, key, []string{"10.250.0.1", "cnperf-server.cnperf.svc", "cnperf-server"}, now, ""},
		{"a host added", cert, key, append([]string{"cnperf-server.cnperf.svc.cluster.local"}, hosts...), now, "names lack cnperf-server.cnperf.svc.cluster.local"},
		{"a host dropped", cert, key, hosts[:2], now, "names no longer wanted: 10.250.0.1"},
		{"expires within the renewal window", cert, key, hosts, now.Add(2 * time.Hour), "within 11h0m0s"},
		{"expired", cert, key, hosts, now.Add(13 * time.Hour), "not valid under the CA"},
		{"another CA's", foreign, foreignKey, hosts, now, "not valid under the CA"},
		{"key of another certificate", cert, otherKey, hosts, now, "key:"},
		{"garbage", []byte("not pem"), key, hosts, now, "no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ca.ServingProblem(tt.cert, tt.key, tt.hosts, tt.at, 11*time.Hour)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("problem %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLoadCA: a CA kept as PEM signs again after loading; a leaf or a
// key that is not the CA's is refused.
func TestLoadCA(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leaf, leafKey, err := ca.Issue([]string{"x"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCA("other", time.Hour)
	otherKey, _ := other.KeyPEM()
	for _, tt := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"kept CA", ca.CertPEM, keyPEM, ""},
		{"a leaf", leaf, leafKey, "not a CA"},
		{"another CA's key", ca.CertPEM, otherKey, "ca key"},
		{"no certificate", nil, keyPEM, "no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadCA(tt.cert, tt.key)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, k, err := got.Issue([]string{"cnperf-server"}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if p := ca.ServingProblem(c, k, []string{"cnperf-server"}, time.Now(), 0); p != "" {
				t.Fatalf("certificate signed by the loaded CA: %s", p)
			}
		})
	}
}

// TestServerReloadsRenewedCertificate: a certificate renewed in place is
// served from the next handshake after the check interval, without a
// restart; a broken renewal keeps the last good one.
func TestServerReloadsRenewedCertificate(t *testing.T) {
	old := ReloadEvery
	ReloadEvery = 0
	defer func() { ReloadEvery = old }()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	issue := func(host string) {
		c, k, err := ca.Issue([]string{host}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for p, b := range map[string][]byte{certFile: c, keyFile: k} {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	issue("first.example")
	cfg, err := ServerConfig(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.DNSNames[0]
	}
	for _, step := range []struct {
		name   string
		change func()
		want   string
	}{
		{"as loaded", func() {}, "first.example"},
		{"renewed in place", func() { issue("second.example") }, "second.example"},
		{"a broken renewal keeps the last good pair", func() {
			if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "second.example"},
		{"fixed again", func() { issue("third.example") }, "third.example"},
	} {
		step.change()
		if got := served(); got != step.want {
			t.Errorf("%s: serves %s, want %s", step.name, got, step.want)
		}
	}
}
