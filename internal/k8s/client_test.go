package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
users:
- name: u
  user:
    token: test-token
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, server)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeAPIServer answers /version and refuses everything else with 403, as
// an API server does for a user without RBAC permission.
func fakeAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			io.WriteString(w, `{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"pods is forbidden: User \"ci\" cannot list resource \"pods\" in API group \"\" in the namespace \"cnperf\""}`)
	}))
	t.Cleanup(s.Close)
	return s
}

// silentListener accepts connections and never answers.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestBadClusterAccess(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no ~/.kube/config
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	cases := []struct {
		name string
		cfg  func() Config
		want string
	}{
		{"no kubeconfig at all", func() Config { return Config{} }, "no kubeconfig"},
		{"kubeconfig file missing", func() Config { return Config{Kubeconfig: "/nonexistent/kubeconfig"} }, "/nonexistent/kubeconfig does not exist"},
		{"connection refused", func() Config { return Config{Kubeconfig: writeKubeconfig(t, "http://"+refused)} }, "unreachable"},
		{"server never answers", func() Config {
			return Config{Kubeconfig: writeKubeconfig(t, "http://"+silentListener(t)), RequestTimeout: time.Second}
		}, "did not answer in time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := New(context.Background(), tc.cfg())
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(tc.want, "kubeconfig") && !errors.Is(err, ErrNoKubeconfig) {
				t.Errorf("error %v does not wrap ErrNoKubeconfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("took %v; must fail within a bounded time", d)
			}
		})
	}
}

func TestMissingRBAC(t *testing.T) {
	s := fakeAPIServer(t)
	c, err := New(context.Background(), Config{Kubeconfig: writeKubeconfig(t, s.URL)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Agents(context.Background())
	if err == nil || !strings.Contains(err.Error(), "lacks RBAC permission") || !strings.Contains(err.Error(), "cannot list resource") {
		t.Fatalf("error %v: want one naming the missing RBAC permission", err)
	}
	err = c.Deploy(context.Background(), DeployOptions{}, 0, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "apply namespace cnperf: forbidden") {
		t.Fatalf("deploy error %v: want forbidden on the first object", err)
	}
}

func fakeClient(objs ...runtime.Object) *Client {
	return NewForInterfaces(fake.NewSimpleClientset(objs...), dynfake.NewSimpleDynamicClient(runtime.NewScheme()))
}

func readyNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func TestNodeThatDoesNotExist(t *testing.T) {
	c := fakeClient(readyNode("node1"), readyNode("node2"))
	start := time.Now()
	_, err := c.RunPod(context.Background(), TestPod{Name: "cnperf-x", Node: "node9",
		Container: corev1.Container{Image: "localhost/cnperf:dev"}}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), `node "node9" does not exist (nodes: node1, node2)`) {
		t.Fatalf("error %v: want one naming the missing node and the nodes there are", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("not immediate")
	}
	pods, _ := c.Kube.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Fatalf("%d pods left behind", len(pods.Items))
	}
}

// TestPendingPodTimesOut: a pod the scheduler cannot place ends in an error
// carrying the scheduler's reason, and is deleted.
func TestPendingPodTimesOut(t *testing.T) {
	c := fakeClient(readyNode("node1"))
	ctx := context.Background()
	go func() { // play the scheduler: mark the pod unschedulable
		for i := 0; i < 100; i++ {
			p, err := c.Kube.CoreV1().Pods(Namespace).Get(ctx, "cnperf-p", metav1.GetOptions{})
			if err == nil {
				p.Status.Phase = corev1.PodPending
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
					Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu."}}
				c.Kube.CoreV1().Pods(Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := c.RunPod(ctx, TestPod{Name: "cnperf-p", Node: "node1", Container: corev1.Container{Image: "i"}}, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Fatalf("error %v: want the scheduler's reason", err)
	}
	if _, gerr := c.Kube.CoreV1().Pods(Namespace).Get(ctx, "cnperf-p", metav1.GetOptions{}); gerr == nil {
		t.Fatal("pending pod not deleted")
	}
}

func TestTestPodValidate(t *testing.T) {
	ok := TestPod{Name: "cnperf-a", Node: "n", Container: corev1.Container{Image: "i"},
		Annotations: map[string]string{IngressBandwidth: "10M", EgressBandwidth: "1G"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*TestPod){
		"name":           func(p *TestPod) { p.Name = "Bad_Name" },
		"no node":        func(p *TestPod) { p.Node = "" },
		"no image":       func(p *TestPod) { p.Container.Image = "" },
		"bandwidth junk": func(p *TestPod) { p.Annotations = map[string]string{EgressBandwidth: "fast"} },
		"bandwidth zero": func(p *TestPod) { p.Annotations = map[string]string{IngressBandwidth: "0"} },
		"too much":       func(p *TestPod) { p.Annotations = map[string]string{IngressBandwidth: "100G"} },
	}
	for name, mut := range bad {
		t.Run(name, func(t *testing.T) {
			p := ok
			p.Annotations = map[string]string{}
			mut(&p)
			if err := p.Validate(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestUndeployNothingIsFine(t *testing.T) {
	c := fakeClient()
	var sb strings.Builder
	if err := c.Undeploy(context.Background(), time.Second, &sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "nothing to remove") {
		t.Fatalf("output %q", sb.String())
	}
}

func TestStatusNotDeployed(t *testing.T) {
	for _, c := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"no namespace", nil, "cnperf is not deployed (no namespace cnperf)"},
		{"empty namespace", []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}},
			"cnperf is not deployed in namespace cnperf (no cnperf-server Deployment, no agent DaemonSets)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := fakeClient(c.objs...).Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Deployed || st.Ready() || st.NotReady() != c.want {
				t.Fatalf("status %+v: %q, want %q", st, st.NotReady(), c.want)
			}
		})
	}
}

func TestPodProblem(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "agent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}}}
	if got := PodProblem(p); !strings.Contains(got, "ErrImageNeverPull") {
		t.Fatalf("PodProblem = %q", got)
	}
}

// TestServerReadyOnlyOnceRolledOut: a Deployment whose latest change the
// controller has not seen, or whose available pods are of the old
// template, is not ready: `cnperf k8s deploy --wait` must not return
// while the old server pod still serves.
func TestServerReadyOnlyOnceRolledOut(t *testing.T) {
	one := int32(1)
	for _, c := range []struct {
		name                          string
		gen, observed                 int64
		available, updated, wantReady int32
	}{
		{"rolled out", 2, 2, 1, 1, 1},
		{"change not yet observed", 2, 1, 1, 1, 0},
		{"old pod still the available one", 2, 2, 1, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: ServerName, Namespace: Namespace, Generation: c.gen},
				Spec:   appsv1.DeploymentSpec{Replicas: &one},
				Status: appsv1.DeploymentStatus{ObservedGeneration: c.observed, AvailableReplicas: c.available, UpdatedReplicas: c.updated}}
			st, err := fakeClient(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, d).Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Server.Ready != c.wantReady {
				t.Errorf("server ready %d, want %d", st.Server.Ready, c.wantReady)
			}
		})
	}
}
