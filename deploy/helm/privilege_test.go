package helm

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cnperf/cnperf/internal/certs"
	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/k8s/psatest"
)

// TestChartLeastPrivilege: `helm template` with the default values has no
// image tagged latest, no added capability (NET_ADMIN or other), no host
// network and no namespace labelled privileged, and every pod passes Pod
// Security restricted as the API server's admission checks it; each
// opt-in adds its agent set and labels the namespace privileged.
func TestChartLeastPrivilege(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		level string
	}{
		{"default", nil, "restricted"},
		{"hostAgents", []string{"hostAgents=true"}, "privileged"},
		{"qosAgents", []string{"qosAgents=true"}, "privileged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, append([]string{"namespace.create=true"}, tc.sets...)...)
			ns := got["Namespace/cnperf"].(*corev1.Namespace)
			if l := ns.Labels["pod-security.kubernetes.io/enforce"]; l != tc.level {
				t.Errorf("namespace enforces %q, want %q", l, tc.level)
			}
			var objs []runtime.Object
			var hostNet, added bool
			for _, o := range got {
				objs = append(objs, o)
				ps := k8s.PodSpecOf(o)
				if ps == nil {
					continue
				}
				hostNet = hostNet || ps.HostNetwork
				for _, c := range ps.Containers {
					if i := strings.LastIndex(c.Image, ":"); i < 0 || strings.Contains(c.Image[i:], "/") || c.Image[i+1:] == "latest" {
						t.Errorf("image %q: latest", c.Image)
					}
					if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
						added = true
					}
				}
			}
			bad, err := psatest.Violations("restricted", objs)
			if err != nil {
				t.Fatal(err)
			}
			if restricted := tc.level == "restricted"; restricted != (len(bad) == 0) || restricted == (hostNet || added) {
				t.Errorf("restricted %v: host network %v, capabilities added %v, Pod Security violations:\n%s", restricted, hostNet, added, strings.Join(bad, "\n"))
			}
		})
	}
}

// TestChartTLS: by default the server serves HTTPS with a certificate the
// chart made, for the Service's names, signed by an ECDSA CA whose key
// `cnperf k8s certs` can load to renew it, and agents verify it with that
// CA; tls.enabled=false serves plain HTTP.
func TestChartTLS(t *testing.T) {
	got := render(t)
	caPEM := []byte(got["ConfigMap/cnperf-ca-bundle"].(*corev1.ConfigMap).Data["ca.crt"])
	caSecret := got["Secret/cnperf-ca"].(*corev1.Secret)
	if _, err := certs.LoadCA(caSecret.Data["ca.crt"], caSecret.Data["ca.key"]); err != nil {
		t.Errorf("cnperf cannot load the chart's CA (to renew): %v", err)
	}
	serving := got["Secret/cnperf-server-tls"].(*corev1.Secret)
	block, _ := pem.Decode(serving.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatalf("serving certificate: no PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca bundle: no certificate")
	}
	for _, name := range []string{"cnperf-server.cnperf.svc", "cnperf-server"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: time.Now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	args := func(objs map[string]runtime.Object, k string) string {
		ps := k8s.PodSpecOf(objs[k])
		if ps == nil {
			t.Fatalf("%s: not rendered as a Deployment or DaemonSet", k)
		}
		return strings.Join(ps.Containers[0].Args, " ")
	}
	if a := args(got, "Deployment/cnperf-server"); !strings.Contains(a, "--tls-cert") {
		t.Errorf("server args %q: no --tls-cert", a)
	}
	if a := args(got, "DaemonSet/cnperf-agent"); !strings.Contains(a, "https://") || !strings.Contains(a, "--ca-file /etc/cnperf/ca/ca.crt") {
		t.Errorf("agent args %q: not https with the CA", a)
	}
	plain := render(t, "tls.enabled=false")
	if a := args(plain, "Deployment/cnperf-server"); strings.Contains(a, "--tls-cert") {
		t.Errorf("tls.enabled=false: server args %q", a)
	}
	for _, k := range []string{"Secret/cnperf-ca", "ConfigMap/cnperf-ca-bundle", "Secret/cnperf-server-tls"} {
		if _, ok := plain[k]; ok {
			t.Errorf("tls.enabled=false renders %s", k)
		}
	}
	if own := render(t, "tls.existingSecret=my-tls"); !slices.ContainsFunc(k8s.PodSpecOf(own["Deployment/cnperf-server"]).Volumes,
		func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "my-tls" }) || own["Secret/cnperf-server-tls"] != nil {
		t.Errorf("tls.existingSecret: the server should mount my-tls and the chart make no certificate")
	}
}
