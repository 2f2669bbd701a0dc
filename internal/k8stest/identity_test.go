package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/k8s"
)

// agentIdentity checks agents' identity in the real cluster (issue #11):
// the cluster holds no agent secret, so the agents that registered did so
// with their projected ServiceAccount tokens through TokenReview; an agent
// in a pod of another ServiceAccount is refused; and tokens the API server
// issues for a pod speak for that pod only (statuses logged).
func agentIdentity(ctx context.Context, t *testing.T, kc *k8s.Client, agents []k8s.Agent) {
	ns := k8s.Namespace
	sec, err := kc.Kube.CoreV1().Secrets(ns).Get(ctx, k8s.TokensSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sec.Data["agent-token"]; ok || len(sec.Data) != 1 {
		t.Errorf("secret %s holds %d keys (agent-token %v): want the user token only", k8s.TokensSecret, len(sec.Data), ok)
	}
	fw, userTok, hc := serverAPI(ctx, t, kc)
	defer fw.Close()
	call := func(method, path, token string, body any) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, method, fw.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// Every agent pod is online at the server under its own pod uid.
	var online []api.Agent
	if code, body := call("GET", "/api/v2/agents", userTok, nil); code != 200 || json.Unmarshal([]byte(body), &online) != nil {
		t.Fatalf("agents: %d %s", code, body)
	}
	byUID := map[string]api.Agent{}
	for _, a := range online {
		byUID[a.PodUID] = a
	}
	for _, a := range agents {
		if got, ok := byUID[a.UID]; !ok || got.PodName != a.Name {
			t.Errorf("agent pod %s (%s) not online at the server under its uid: %+v", a.Name, a.UID, got)
		}
	}
	t.Logf("%d agent pods online at the server, authenticated by ServiceAccount token (the cluster holds no agent secret)", len(agents))

	// A pod of another ServiceAccount runs the agent with its own
	// projected token (audience cnperf): the server refuses it.
	const intruder = "cnperf-intruder"
	sas := kc.Kube.CoreV1().ServiceAccounts(ns)
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: intruder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer sas.Delete(context.WithoutCancel(ctx), intruder, metav1.DeleteOptions{})
	tmpl, err := kc.AgentTemplate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods := kc.Kube.CoreV1().Pods(ns)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: intruder},
		Spec: corev1.PodSpec{ServiceAccountName: intruder, AutomountServiceAccountToken: new(bool), NodeName: agents[0].Node,
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{tmpl}, Volumes: k8s.AgentVolumes(tmpl),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Delete(context.WithoutCancel(ctx), intruder, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	var logs string
	var logErr error
	for deadline := time.Now().Add(90 * time.Second); ; {
		b, err := pods.GetLogs(intruder, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs, logErr = string(b), err
		if strings.Contains(logs, "heartbeat failed") || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("agent in pod %s (ServiceAccount %s) logged:\n%s", intruder, intruder, firstLines(logs, "heartbeat failed", 1))
	if !strings.Contains(logs, "not of an agent's service account") {
		p, _ := pods.Get(ctx, intruder, metav1.GetOptions{})
		st, _ := json.Marshal(p.Status)
		t.Errorf("the intruder's agent was not refused for its ServiceAccount; log error %v, log:\n%s\npod status: %s", logErr, logs, st)
	}

	// Tokens the API server issues, bound to a pod: each speaks for its
	// own pod only. The start call names a task that does not exist, so an
	// authenticated, authorised call answers 404 and changes nothing.
	mint := func(sa, podName string, podUID types.UID, audience string) string {
		t.Helper()
		tr, err := sas.CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr(int64(600)),
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: podName, UID: podUID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s bound to pod %s: %v", sa, podName, err)
		}
		return tr.Status.Token
	}
	a, b := agents[0], agents[1]
	cases := []struct {
		name, token, uid string
		want             int
	}{
		{"agent A's token, for A", mint("cnperf-agent", a.Name, types.UID(a.UID), "cnperf"), a.UID, http.StatusNotFound},
		{"agent A's token, for B", mint("cnperf-agent", a.Name, types.UID(a.UID), "cnperf"), b.UID, http.StatusForbidden},
		{"intruder pod's token, for itself", mint(intruder, intruder, pod.UID, "cnperf"), string(pod.UID), http.StatusUnauthorized},
		{"intruder pod's token, for A", mint(intruder, intruder, pod.UID, "cnperf"), a.UID, http.StatusUnauthorized},
		{"agent A's account, API audience", mint("cnperf-agent", a.Name, types.UID(a.UID), "https://kubernetes.default.svc.cluster.local"), a.UID, http.StatusUnauthorized},
	}
	for _, c := range cases {
		code, body := call("POST", "/api/v2/agent/tasks/no-such-task/start", c.token, api.StartRequest{PodUID: c.uid})
		t.Logf("%-34s -> %d %s", c.name, code, body)
		if code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// firstLines returns up to n lines of s holding sub.
func firstLines(s, sub string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
