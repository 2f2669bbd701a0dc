package k8stest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/k8s"
)

// serverTLS checks what `cnperf k8s deploy` (TLS by default) made on the
// real cluster (issue #11 part 7): the CA's key in a Secret no pod
// mounts, the CA certificate alone in the ConfigMap agents mount, a
// serving certificate for the Service's names; the server answers HTTPS
// only (a plain-HTTP request fails, an unverified client fails); every
// agent is online over TLS; the dashboard's session cookie is Secure and
// failed logins are rate limited; a re-deploy keeps the CA and the
// certificate, and a re-deploy with a NodePort re-issues the certificate
// for the nodes' addresses under the same CA, the server rolls and the
// agents come back online.
func serverTLS(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, agents []k8s.Agent) {
	ns := kc.NS()
	caSecret, err := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.CASecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := kc.Kube.CoreV1().ConfigMaps(ns).Get(ctx, k8s.CABundle, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bundle.Data) != 1 || bundle.Data[k8s.CABundleKey] != string(caSecret.Data["ca.crt"]) || strings.Contains(bundle.Data[k8s.CABundleKey], "PRIVATE") {
		t.Errorf("configmap %s: want the CA certificate alone, has keys %d", k8s.CABundle, len(bundle.Data))
	}
	serving, err := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.ServingSecret, metav1.GetOptions{})
	if err != nil || serving.Type != corev1.SecretTypeTLS {
		t.Fatalf("secret %s: %v (type %v)", k8s.ServingSecret, err, serving.Type)
	}
	pods, err := kc.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == k8s.CASecret {
				t.Errorf("pod %s mounts the CA's Secret (its key)", p.Name)
			}
		}
		if p.Labels["app.kubernetes.io/name"] == "cnperf-agent" {
			args := strings.Join(p.Spec.Containers[0].Args, " ")
			if !strings.Contains(args, "--server https://") || !strings.Contains(args, "--ca-file /etc/cnperf/ca/ca.crt") {
				t.Errorf("agent pod %s: args %s, want https:// and --ca-file", p.Name, args)
			}
		}
	}

	fw, err := kc.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	if fw.TLS == nil || !strings.HasPrefix(fw.URL, "https://") {
		t.Fatalf("port-forward %s: the CLI does not see the server's TLS", fw.URL)
	}
	tok, _, err := kc.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	verified, err := fw.HTTPClient(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	get := func(hc *http.Client, base string) (*http.Response, string, error) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, "GET", base+"/api/v2/agents", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp, string(b), nil
	}
	// Plain HTTP to the same port: refused with Go's 400, no API answer.
	plain := "http://" + strings.TrimPrefix(fw.URL, "https://")
	resp, body, err := get(&http.Client{Timeout: 30 * time.Second}, plain)
	if err == nil && (resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "HTTP request to an HTTPS server")) {
		t.Errorf("plain HTTP: %d %q, want 400 from an HTTPS-only server", resp.StatusCode, body)
	}
	t.Logf("plain http GET /api/v2/agents: %v %q", status(resp, err), strings.TrimSpace(body))
	// HTTPS without the CA, and with the CA but without the Service's
	// name: both refused by the client (verification is not skipped).
	for name, hc := range map[string]*http.Client{
		"system pool":        {Timeout: 30 * time.Second},
		"CA, name 127.0.0.1": clientWith(t, fw.TLS.CAPEM, ""),
	} {
		_, _, err := get(hc, fw.URL)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("https with %s: %v, want a certificate error", name, err)
		}
		t.Logf("https with %s: %v", name, err)
	}
	resp, body, err = get(verified, fw.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("verified https: %v %s", err, body)
	}
	leaf := resp.TLS.PeerCertificates[0]
	want := k8s.ServerDNSNames(ns)
	if !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("certificate names %v, want %v", leaf.DNSNames, want)
	}
	t.Logf("verified https (%s, CA from configmap %s): certificate %v until %s, issuer %q", tlsVersion(resp.TLS.Version), k8s.CABundle,
		leaf.DNSNames, leaf.NotAfter.UTC().Format(time.DateOnly), leaf.Issuer.CommonName)
	var online []api.Agent
	if err := json.Unmarshal([]byte(body), &online); err != nil {
		t.Fatal(err)
	}
	if len(online) < len(agents) {
		t.Errorf("%d agents online over TLS, want %d", len(online), len(agents))
	}
	t.Logf("%d agents online over TLS (https://, --ca-file, ServiceAccount token)", len(online))

	// The dashboard over HTTPS: the session cookie is Secure; failed
	// logins from one address are cut off with 429.
	login := func(token string) *http.Response {
		hc := *verified
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, "POST", fw.URL+"/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("login: %v", err)
		}
		resp.Body.Close()
		return resp
	}
	r := login(tok)
	var secure bool
	for _, c := range r.Cookies() {
		secure = secure || c.Secure && c.HttpOnly && c.Value != ""
	}
	if r.StatusCode != http.StatusSeeOther || !secure {
		t.Errorf("login: %d cookies %v, want 303 and a Secure HttpOnly session cookie", r.StatusCode, r.Header["Set-Cookie"])
	}
	var codes []int
	for range 6 {
		codes = append(codes, login("wrong-token").StatusCode)
	}
	if !slices.Equal(codes, []int{401, 401, 401, 401, 401, 429}) {
		t.Errorf("six wrong logins: %v, want five 401 then 429", codes)
	}
	t.Logf("dashboard login over https: %d, Secure cookie %v; six wrong logins: %v", r.StatusCode, secure, codes)

	// Re-deploy: the CA and the serving certificate stay, nothing rolls.
	server := serverPod(ctx, t, kc)
	out, errOut, err := cnp(3*time.Minute, "k8s", "deploy", "--image", CnperfImage, "--image-pull-policy", "Never", "--host-agents", "--qos-agents", "--wait", "2m")
	if err != nil {
		t.Fatalf("re-deploy: %v\n%s\n%s", err, out, errOut)
	}
	again, _ := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.ServingSecret, metav1.GetOptions{})
	caAgain, _ := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.CASecret, metav1.GetOptions{})
	if string(again.Data["tls.crt"]) != string(serving.Data["tls.crt"]) || string(caAgain.Data["ca.key"]) != string(caSecret.Data["ca.key"]) {
		t.Errorf("re-deploy replaced the CA or the serving certificate:\n%s", out)
	}
	if p := serverPod(ctx, t, kc); p.UID != server.UID {
		t.Errorf("re-deploy restarted the server (%s -> %s)", server.Name, p.Name)
	}
	t.Logf("re-deploy: CA and serving certificate kept, server pod %s kept:\n%s", server.Name, grepLines(out, "cnperf-ca", "cnperf-server-tls"))

	// `cnperf k8s certs` (the material alone, for the overlay and the
	// chart) finds it all in place and changes nothing.
	out, errOut, err = cnp(time.Minute, "k8s", "certs")
	if err != nil || !strings.Contains(out, "secret/cnperf-server-tls kept") {
		t.Errorf("cnperf k8s certs: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("cnperf k8s certs: %s", strings.TrimSpace(out))

	// Re-deploy as a NodePort and back: each time the certificate's names
	// change, so it is re-issued under the same CA, the server rolls, and
	// the agents come back online over TLS.
	for _, step := range []struct {
		args []string
		why  string
		ips  bool
	}{
		{[]string{"--node-port", "30001"}, "names lack 10.250.0.", true},
		{nil, "names no longer wanted: 10.250.0.", false},
	} {
		before := serverPod(ctx, t, kc)
		t0 := time.Now()
		args := append([]string{"k8s", "deploy", "--image", CnperfImage, "--image-pull-policy", "Never", "--host-agents", "--qos-agents", "--wait", "3m"}, step.args...)
		out, errOut, err := cnp(4*time.Minute, args...)
		if err != nil {
			t.Fatalf("deploy %v: %v\n%s\n%s", step.args, err, out, errOut)
		}
		if !strings.Contains(out, step.why) {
			t.Errorf("deploy %v: want a new certificate because %q:\n%s", step.args, step.why, out)
		}
		caNow, _ := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.CASecret, metav1.GetOptions{})
		if string(caNow.Data["ca.key"]) != string(caSecret.Data["ca.key"]) {
			t.Errorf("deploy %v replaced the CA", step.args)
		}
		if p := serverPod(ctx, t, kc); p.UID == before.UID {
			t.Errorf("deploy %v: the server did not roll to the new certificate", step.args)
		}
		n := waitOnline(ctx, t, kc, len(agents), 90*time.Second)
		fw2, err := kc.ForwardServer(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hc, _ := fw2.HTTPClient(30 * time.Second)
		resp, _, err := get(hc, fw2.URL)
		fw2.Close()
		if err != nil {
			t.Fatalf("verified https after the rotation: %v", err)
		}
		var hasIP bool
		for _, ip := range resp.TLS.PeerCertificates[0].IPAddresses {
			hasIP = hasIP || strings.HasPrefix(ip.String(), "10.250.0.")
		}
		if hasIP != step.ips {
			t.Errorf("deploy %v: certificate addresses %v", step.args, resp.TLS.PeerCertificates[0].IPAddresses)
		}
		t.Logf("deploy %v in %v: %s; server rolled; %d agents online over TLS again; certificate names %v %v", step.args,
			time.Since(t0).Round(time.Second), grepLines(out, "cnperf-server-tls"), n,
			resp.TLS.PeerCertificates[0].DNSNames, resp.TLS.PeerCertificates[0].IPAddresses)
	}
}

// waitOnline waits until at least want agents are online at the server
// (read over the verified port-forward) and returns how many are.
func waitOnline(ctx context.Context, t *testing.T, kc *k8s.Client, want int, within time.Duration) int {
	t.Helper()
	tok, _, err := kc.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	n := 0
	for {
		fw, err := kc.ForwardServer(ctx, 30*time.Second)
		if err == nil {
			cl, cerr := client.New(fw.URL, tok, fw.ClientOptions()...)
			if cerr != nil {
				fw.Close()
				t.Fatal(cerr)
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			as, lerr := cl.Clients(rctx, false)
			cancel()
			fw.Close()
			if lerr == nil {
				n = len(as)
				if n >= want {
					return n
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d agents online after %v, want %d (last error %v)", n, within, want, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func status(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

func tlsVersion(v uint16) string {
	switch v {
	case 0x0304:
		return "TLS 1.3"
	case 0x0303:
		return "TLS 1.2"
	}
	return "TLS ?"
}

func clientWith(t *testing.T, caPEM []byte, serverName string) *http.Client {
	fw := &k8s.Forward{TLS: &k8s.ServerTLS{CAPEM: caPEM, ServerName: serverName}}
	hc, err := fw.HTTPClient(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func serverPod(ctx context.Context, t *testing.T, kc *k8s.Client) corev1.Pod {
	t.Helper()
	pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{LabelSelector: k8s.ServerSelector})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("server pods: %v (%d)", err, len(pods.Items))
	}
	return pods.Items[0]
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
