package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/certs"
)

// TestEnsureTLS walks a namespace through deploys: the first makes a CA
// and a serving certificate; a second with the same names changes
// nothing; new names, a near expiry, a lost serving Secret or a broken CA
// each re-issue what they must and keep the rest. The CA's key is only in
// the CA Secret; the ConfigMap holds the CA certificate alone.
func TestEnsureTLS(t *testing.T) {
	ctx := context.Background()
	c := fakeClient()
	c.Namespace = "perf"
	hosts := ServerDNSNames("perf")
	now := time.Now()
	first, err := c.EnsureTLS(ctx, hosts, now, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !first.CAMade || !first.ServingMade {
		t.Fatalf("first deploy: %+v, want a CA and a serving certificate made", first)
	}
	caSecret := c.get(t, CASecret)
	cm, err := c.Kube.CoreV1().ConfigMaps("perf").Get(ctx, CABundle, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[CABundleKey] != string(caSecret.Data["ca.crt"]) || strings.Contains(cm.Data[CABundleKey], "PRIVATE KEY") || len(cm.Data) != 1 {
		t.Fatalf("configmap %s: want the CA certificate alone, got keys %v", CABundle, cm.Data)
	}
	if s := c.get(t, ServingSecret); s.Type != corev1.SecretTypeTLS {
		t.Fatalf("serving secret type %s", s.Type)
	}
	for _, tt := range []struct {
		name        string
		before      func(t *testing.T)
		hosts       []string
		at          time.Time
		wantCA      bool // a new CA
		wantServing bool // a new serving certificate
		why         string
	}{
		{"same names: nothing changes", nil, hosts, now, false, false, ""},
		{"a NodePort adds node addresses", nil, append(hosts, "10.250.0.1", "10.250.0.2"), now, false, true, "names lack 10.250.0.1, 10.250.0.2"},
		{"the same again: kept", nil, append(hosts, "10.250.0.1", "10.250.0.2"), now, false, false, ""},
		{"back to ClusterIP: the addresses go", nil, hosts, now, false, true, "names no longer wanted"},
		{"29 days before the end: renewed", nil, hosts, now.Add(ServingValidity - 29*24*time.Hour), false, true, "within"},
		{"serving secret deleted", func(t *testing.T) { c.del(t, ServingSecret) }, hosts, now, false, true, "none yet"},
		{"CA secret broken: a new CA, and a serving certificate under it", func(t *testing.T) {
			s := c.get(t, CASecret)
			s.Data["ca.key"] = []byte("garbage")
			if _, err := c.Kube.CoreV1().Secrets("perf").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, hosts, now, true, true, "not valid under the CA"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			caBefore := c.get(t, CASecret).Data["ca.crt"]
			servingBefore, _ := c.Kube.CoreV1().Secrets(c.NS()).Get(ctx, ServingSecret, metav1.GetOptions{})
			var log strings.Builder
			st, err := c.EnsureTLS(ctx, tt.hosts, tt.at, &log)
			if err != nil {
				t.Fatal(err)
			}
			if st.CAMade != tt.wantCA || st.ServingMade != tt.wantServing {
				t.Fatalf("made CA %v serving %v (why %q), want %v %v\n%s", st.CAMade, st.ServingMade, st.Why, tt.wantCA, tt.wantServing, log.String())
			}
			if tt.why != "" && !strings.Contains(st.Why, tt.why) {
				t.Fatalf("why %q, want %q", st.Why, tt.why)
			}
			caAfter := c.get(t, CASecret)
			if !tt.wantCA && string(caAfter.Data["ca.crt"]) != string(caBefore) {
				t.Fatal("the CA changed on a re-deploy")
			}
			serving := c.get(t, ServingSecret)
			if !tt.wantServing && servingBefore != nil && string(serving.Data["tls.crt"]) != string(servingBefore.Data["tls.crt"]) {
				t.Fatal("the serving certificate changed although it fits")
			}
			ca, err := certs.LoadCA(caAfter.Data["ca.crt"], caAfter.Data["ca.key"])
			if err != nil {
				t.Fatal(err)
			}
			if p := ca.ServingProblem(serving.Data["tls.crt"], serving.Data["tls.key"], tt.hosts, tt.at, 0); p != "" {
				t.Fatalf("after EnsureTLS the serving certificate does not fit: %s", p)
			}
			cm, _ := c.Kube.CoreV1().ConfigMaps("perf").Get(ctx, CABundle, metav1.GetOptions{})
			if cm.Data[CABundleKey] != string(caAfter.Data["ca.crt"]) {
				t.Fatal("the CA bundle is not the CA's certificate")
			}
			if st.CAHash != hashOf(caAfter.Data["ca.crt"]) || st.ServingHash != hashOf(serving.Data["tls.crt"]) {
				t.Fatal("hashes are not those of the stored certificates")
			}
		})
	}
}

func (c *Client) get(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	s, err := c.Kube.CoreV1().Secrets(c.NS()).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (c *Client) del(t *testing.T, name string) {
	t.Helper()
	if err := c.Kube.CoreV1().Secrets(c.NS()).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTLSHostsNodePort: a NodePort server's certificate names the nodes'
// addresses too, each once, sorted.
func TestTLSHostsNodePort(t *testing.T) {
	n1, n2 := readyNode("n1"), readyNode("n2")
	n1.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.0.2"}, {Type: corev1.NodeHostName, Address: "n1"}}
	n2.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.250.0.1"}, {Type: corev1.NodeExternalIP, Address: "10.250.0.2"}}
	c := fakeClient(n1, n2)
	for _, tt := range []struct {
		nodePort bool
		want     string
	}{
		{false, "cnperf-server cnperf-server.cnperf cnperf-server.cnperf.svc cnperf-server.cnperf.svc.cluster.local"},
		{true, "cnperf-server cnperf-server.cnperf cnperf-server.cnperf.svc cnperf-server.cnperf.svc.cluster.local 10.250.0.1 10.250.0.2"},
	} {
		got, err := c.TLSHosts(context.Background(), tt.nodePort)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("node port %v: %v, want %s", tt.nodePort, got, tt.want)
		}
	}
}

// TestRenderTLS: with TLS the server serves its Secret and probes over
// HTTPS; every agent DaemonSet reaches it over https://, verifies the
// Service's name with the CA bundle (a ConfigMap: no key), and nothing
// mounts the CA's Secret.
func TestRenderTLS(t *testing.T) {
	for _, o := range render(t, DeployOptions{TLS: true, PostgresSecret: "pg"}) {
		var ps *corev1.PodSpec
		switch x := o.(type) {
		case *appsv1.Deployment:
			ps = &x.Spec.Template.Spec
			c := ps.Containers[0]
			args := strings.Join(c.Args, " ")
			if !strings.Contains(args, "--tls-cert /etc/cnperf/tls/tls.crt --tls-key /etc/cnperf/tls/tls.key") {
				t.Errorf("server args %s", args)
			}
			if c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("server probes not over HTTPS")
			}
			if len(ps.Volumes) != 1 || ps.Volumes[0].Secret == nil || ps.Volumes[0].Secret.SecretName != ServingSecret {
				t.Errorf("server volumes %+v: want the serving Secret alone (PostgreSQL: no data volume)", ps.Volumes)
			}
		case *appsv1.DaemonSet:
			ps = &x.Spec.Template.Spec
			args := strings.Join(ps.Containers[0].Args, " ")
			for _, want := range []string{"--server https://$(CNPERF_SERVER_SERVICE_HOST):$(CNPERF_SERVER_SERVICE_PORT)",
				"--ca-file /etc/cnperf/ca/ca.crt", "--tls-server-name cnperf-server.$(POD_NAMESPACE).svc"} {
				if !strings.Contains(args, want) {
					t.Errorf("%s args %s: lack %s", x.Name, args, want)
				}
			}
			var ca bool
			for _, v := range ps.Volumes {
				ca = ca || v.ConfigMap != nil && v.ConfigMap.Name == CABundle
			}
			if !ca {
				t.Errorf("%s mounts no CA bundle", x.Name)
			}
			if vols := agentStateVolumes(ps.Containers[0]); len(vols) != len(ps.Volumes) {
				t.Errorf("%s: a shaped agent made from it would get volumes %v, the DaemonSet has %v", x.Name, vols, ps.Volumes)
			}
		}
		if ps != nil {
			for _, v := range ps.Volumes {
				if v.Secret != nil && v.Secret.SecretName == CASecret {
					t.Errorf("a pod mounts the CA's Secret (its key)")
				}
			}
		}
	}
}

// TestBaseServesHTTPS: the kustomize base as users apply it (no option
// applied) serves HTTPS only and its agents verify the server; plain HTTP
// is the opt-in overlays/plain-http (Render without TLS).
func TestBaseServesHTTPS(t *testing.T) {
	docs, err := BaseDocuments()
	if err != nil {
		t.Fatal(err)
	}
	var server, agents int
	for _, d := range docs {
		obj, err := DecodeStrict(d)
		if err != nil {
			t.Fatal(err)
		}
		switch x := obj.(type) {
		case *appsv1.Deployment:
			server++
			if a := strings.Join(x.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(a, "--tls-cert") {
				t.Errorf("base server args %q: not HTTPS", a)
			}
		case *appsv1.DaemonSet:
			agents++
			if a := strings.Join(x.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(a, "https://") || !strings.Contains(a, "--ca-file") {
				t.Errorf("base %s args %q: not HTTPS with the CA", x.Name, a)
			}
		}
	}
	if server != 1 || agents == 0 {
		t.Fatalf("base: %d servers, %d agent DaemonSets", server, agents)
	}
	for _, o := range render(t, DeployOptions{HostAgents: true}) {
		switch o.(type) {
		case *appsv1.Deployment, *appsv1.DaemonSet:
		default:
			continue
		}
		if b, _ := json.Marshal(o); bytes.Contains(b, []byte("https://")) || bytes.Contains(b, []byte("--tls-cert")) || bytes.Contains(b, []byte(CABundle)) {
			t.Errorf("plain HTTP (TLS false) still has TLS in %T: %s", o, b)
		}
	}
}
