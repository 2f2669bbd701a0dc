package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnperf/cnperf/internal/suite"
)

// TestRunService: the run's Service selects exactly the agent pod (by a
// label put on it for the run), forwards the responder's port for TCP and
// UDP, is ready once its EndpointSlice lists the pod, and its removal
// deletes it and takes the label off again. The Env offers Services and
// points the phase's Service steps at the ClusterIP.
func TestRunService(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cnperf-agent-x1", Namespace: Namespace,
		Labels: map[string]string{"app.kubernetes.io/name": "cnperf-agent"}}}
	kc := fake.NewClientset(pod)
	// What the API server and the EndpointSlice controller would do.
	kc.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		svc.Spec.ClusterIP = "10.97.0.10"
		ready := true
		err := kc.Tracker().Create(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-abcde", Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.245.1.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}, Namespace)
		return false, nil, err
	})
	c := NewForInterfaces(kc, nil)
	ctx := context.Background()
	svc, err := c.CreateRunService(ctx, pod.Name, 5201, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if svc.Addr() != "10.97.0.10:5201" || svc.PodIP != "10.245.1.7" {
		t.Errorf("service %+v, want 10.97.0.10:5201 to 10.245.1.7", svc)
	}
	got, err := kc.CoreV1().Services(Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Type != corev1.ServiceTypeClusterIP || got.Spec.Selector[ServiceSelectorLabel] != svc.Name || len(got.Spec.Selector) != 1 ||
		got.Labels[RunServiceLabel] != "true" {
		t.Errorf("service %+v", got)
	}
	protos := map[corev1.Protocol]bool{}
	for _, p := range got.Spec.Ports {
		if p.Port != 5201 || p.TargetPort.IntValue() != 5201 {
			t.Errorf("port %+v, want 5201 to 5201", p)
		}
		protos[p.Protocol] = true
	}
	if !protos[corev1.ProtocolTCP] || !protos[corev1.ProtocolUDP] || len(got.Spec.Ports) != 2 {
		t.Errorf("ports %+v, want TCP and UDP", got.Spec.Ports)
	}
	p, _ := kc.CoreV1().Pods(Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if p.Labels[ServiceSelectorLabel] != svc.Name || p.Labels["app.kubernetes.io/name"] != "cnperf-agent" {
		t.Errorf("pod labels %v", p.Labels)
	}

	if err := c.DeleteRunService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Services(Namespace).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
		t.Error("service left after DeleteRunService")
	}
	p, _ = kc.CoreV1().Pods(Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if _, ok := p.Labels[ServiceSelectorLabel]; ok || p.Labels["app.kubernetes.io/name"] != "cnperf-agent" {
		t.Errorf("pod labels after removal %v", p.Labels)
	}
	// Removing it again (an undo after a failure) is no error.
	if err := c.DeleteRunService(ctx, svc); err != nil {
		t.Errorf("second removal: %v", err)
	}

	e := &Env{Client: c}
	if !e.Caps().Has(suite.CapService) {
		t.Errorf("caps %+v lack %s", e.Caps(), suite.CapService)
	}
	e.svc.set("cnperf-agent-x1", svc.Addr())
	st := e.Rewrite(suite.Step{Service: true, Dst: suite.Endpoint{Name: "cnperf-agent-x1"}})
	if st.Via != "10.97.0.10:5201" {
		t.Errorf("service step via %q", st.Via)
	}
}

// TestRunServiceNoEndpoint: a Service whose pod never becomes a ready
// endpoint is an error naming it, and nothing is left behind.
func TestRunServiceNoEndpoint(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cnperf-agent-x1", Namespace: Namespace}}
	kc := fake.NewClientset(pod)
	kc.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Service).Spec.ClusterIP = "10.97.0.10"
		return false, nil, nil
	})
	c := NewForInterfaces(kc, nil)
	_, err := c.CreateRunService(context.Background(), pod.Name, 5201, 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no ready endpoint") {
		t.Fatalf("error %v, want one saying the Service has no ready endpoint", err)
	}
	svcs, _ := kc.CoreV1().Services(Namespace).List(context.Background(), metav1.ListOptions{})
	p, _ := kc.CoreV1().Pods(Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if len(svcs.Items) != 0 || len(p.Labels) != 0 {
		t.Errorf("left behind: %d services, pod labels %v (error was %v)", len(svcs.Items), p.Labels, err)
	}
	if _, err := c.CreateRunService(context.Background(), pod.Name, 0, time.Second); err == nil {
		t.Error("port 0 accepted")
	}
}
