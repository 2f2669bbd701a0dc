package certs

import (
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
