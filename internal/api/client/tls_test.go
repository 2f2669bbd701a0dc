package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/certs"
)

// TestServerNameAndCAPEM: a client reaching a server by address verifies
// the certificate against the name WithServerName gives and the CA
// WithCAPEM gives; a missing or wrong name, or another CA, is refused.
func TestServerNameAndCAPEM(t *testing.T) {
	ca, err := certs.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const name = "cnperf-server.cnperf.svc"
	certPEM, keyPEM, err := ca.Issue([]string{"cnperf-server", name}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cf, kf := dir+"/tls.crt", dir+"/tls.key"
	writeFile(t, cf, certPEM)
	writeFile(t, kf, keyPEM)
	srvCfg, err := certs.ServerConfig(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":0,"msg":"ok","data":[]}`))
	}))
	ts.TLS = srvCfg
	ts.StartTLS()
	defer ts.Close()
	for _, tt := range []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"CA and service name", []Option{WithCAPEM(ca.CertPEM), WithServerName(name)}, ""},
		{"CA without the name (127.0.0.1 is not in the certificate)", []Option{WithCAPEM(ca.CertPEM)}, "127.0.0.1"},
		{"CA and a wrong name", []Option{WithCAPEM(ca.CertPEM), WithServerName("cnperf-server.other.svc")}, "cnperf-server.other.svc"},
		{"another CA", []Option{WithCAPEM(other.CertPEM), WithServerName(name)}, "unknown authority"},
		{"the system pool", []Option{WithServerName(name)}, "unknown authority"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(ts.URL, "tok", tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.Clients(ctx, false)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := New(ts.URL, "tok", WithCAPEM([]byte("junk"))); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("junk CA: %v", err)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
