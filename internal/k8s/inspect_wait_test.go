package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestInspectNodeWithoutCNIDir: a node without the CNI configuration
// directory the inspector mounts (the kubelet's FailedMount "hostPath
// type check failed", which no waiting mends) fails the inspection at
// once, naming the directory and --cni-conf-dir, instead of after the
// whole timeout with "ContainerCreating". A pod that is only slow says
// its last warning when the timeout ends it.
func TestInspectNodeWithoutCNIDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		warning string
		want    []string
		missing bool // ErrHostPathMissing, before the timeout
	}{
		{"hostPath missing", `MountVolume.SetUp failed for volume "cni" : hostPath type check failed: /etc/cni/net.d is not a directory`,
			[]string{"no CNI configuration directory /etc/cni/net.d", "--cni-conf-dir", "FailedMount", "kcn-node1"}, true},
		{"another warning", `MountVolume.SetUp failed for volume "cni" : mount failed: exit status 32`,
			[]string{"not ready after", "ContainerCreating", "last warning: FailedMount", "exit status 32"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "cnperf-agent", Namespace: Namespace},
				Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "agent", Image: "registry.example/cnperf@sha256:" + strings.Repeat("ab", 32)}}}}}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kcn-node1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			kc := fake.NewClientset(ds, node)
			// What the scheduler and the kubelet would do: the pod placed,
			// its container waiting, the kubelet's FailedMount event.
			kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				p.Spec.NodeName = "kcn-node1"
				p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "inspect",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
				err := kc.Tracker().Create(corev1.SchemeGroupVersion.WithResource("events"), &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Name: p.Name + ".1", Namespace: Namespace},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: p.Name, Namespace: Namespace},
					Type:           corev1.EventTypeWarning, Reason: "FailedMount", Message: tc.warning,
					LastTimestamp: metav1.Now(),
				}, Namespace)
				return false, nil, err
			})
			c := NewForInterfaces(kc, nil)
			start := time.Now()
			_, err := c.InspectNode(context.Background(), "kcn-node1", 0, "", 3*time.Second)
			took := time.Since(start)
			if err == nil {
				t.Fatal("inspection succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if got := errors.Is(err, ErrHostPathMissing); got != tc.missing {
				t.Errorf("errors.Is(ErrHostPathMissing) = %v, want %v: %v", got, tc.missing, err)
			}
			if tc.missing && took >= 3*time.Second {
				t.Errorf("took %v: the missing directory should end the wait before the timeout", took)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}
