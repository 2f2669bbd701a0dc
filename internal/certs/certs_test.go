package certs

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestServeAndVerify: a server with a certificate from WriteServer is
// trusted by a client given the CA file, and refused by one using the
// system pool (the CA is private).
func TestServeAndVerify(t *testing.T) {
	dir := t.TempDir()
	f, err := WriteServer(dir, []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := ServerConfig(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			t.Error("request without TLS state")
		}
		_, _ = w.Write([]byte("ok"))
	}))
	ts.TLS = srvCfg
	ts.StartTLS()
	defer ts.Close()

	for _, tt := range []struct {
		name, caFile, wantErr string
	}{
		{"CA file", f.CA, ""},
		{"system pool", "", "certificate signed by unknown authority"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ClientConfig(tt.caFile)
			if err != nil {
				t.Fatal(err)
			}
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := hc.Get(ts.URL)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("GET with the CA: %v", err)
				}
				resp.Body.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("GET: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := ServerConfig("", ""); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Errorf("no files: %v", err)
	}
	if _, err := ServerConfig(dir+"/none.crt", dir+"/none.key"); err == nil || !strings.Contains(err.Error(), "none.crt") {
		t.Errorf("missing files: %v", err)
	}
	if _, err := ClientConfig(dir + "/none.pem"); err == nil || !strings.Contains(err.Error(), "read CA file") {
		t.Errorf("missing CA file: %v", err)
	}
	f, err := WriteServer(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ClientConfig(f.Key); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as CA file: %v", err)
	}
	if _, err := NewCA("x", time.Hour); err != nil {
		t.Fatal(err)
	}
}
