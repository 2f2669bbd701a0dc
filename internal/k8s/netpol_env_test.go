package k8s

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// connServer answers connect samplers: each run is one try, which
// connects from the try allowFrom on (never when 0), else times out.
type connServer struct {
	suite.API
	mu        sync.Mutex
	tries     int
	allowFrom int
	tasks     []api.RunTask
}

func (s *connServer) CreateRun(_ context.Context, rc api.RunCreate) (api.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	s.tasks = append(s.tasks, rc.Tasks...)
	outcome := probe.ConnectTimeout
	if s.allowFrom > 0 && s.tries >= s.allowFrom {
		outcome = probe.ConnectOK
	}
	raw, _ := json.Marshal(probe.Result{Connects: &probe.ConnectTimeline{Attempts: 5, Outcomes: map[string]int{outcome: 5}}})
	return api.Run{ID: "r", State: api.RunSucceeded, Tasks: []api.TaskV2{{State: api.StateSucceeded, Result: raw}}}, nil
}

func (s *connServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries
}

// policyEnv is an environment on Calico with agent pods cnperf-agent-dst
// (node n1) and cnperf-agent-src (node n2).
func policyEnv(srv suite.API) (*Env, *fake.Clientset) {
	mk := func(name, node, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: types.UID("u-" + name),
			Labels: map[string]string{"app.kubernetes.io/name": "cnperf-agent"}},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	}
	kc := fake.NewClientset(mk("cnperf-agent-dst", "n1", "10.0.0.1"), mk("cnperf-agent-src", "n2", "10.0.1.1"))
	return &Env{Client: NewForInterfaces(kc, nil), Server: srv, CNI: CNI{Name: "calico"}}, kc
}

func podPatches(kc *fake.Clientset) int {
	n := 0
	for _, a := range kc.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

// TestEnvPolicyLabelsOncePerRun: the pair is labelled once for the run,
// not per policy set (a label change gives a pod a new security identity,
// which Cilium takes up to 35 s to use while it defers the pod's policy
// changes), and the labels come off when the run finishes.
func TestEnvPolicyLabelsOncePerRun(t *testing.T) {
	e, kc := policyEnv(&connServer{allowFrom: 1})
	ctx := context.Background()
	for _, set := range []suite.PolicySet{
		{Count: 2, Selecting: 2, From: "cnperf-agent-src", Port: 5201},
		{Deny: true, From: "cnperf-agent-src", Port: 5201},
		{Count: 3},
	} {
		undo, err := e.Apply(ctx, suite.Change{What: suite.CapNetworkPolicy, Member: "cnperf-agent-dst", Policy: &set})
		if err != nil {
			t.Fatal(err)
		}
		if err := undo(ctx); err != nil {
			t.Fatal(err)
		}
		for pod, key := range map[string]string{"cnperf-agent-dst": PolicyTargetLabel, "cnperf-agent-src": PolicySourceLabel} {
			if p, _ := kc.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{}); p.Labels[key] != "true" {
				t.Errorf("after set %+v: pod %s labels %v, want %s kept for the run", set, pod, p.Labels, key)
			}
		}
	}
	if n := podPatches(kc); n != 2 {
		t.Errorf("%d pod label patches for three sets, want 2 (each pod once)", n)
	}
	f, ok := any(e).(interface{ Finish(context.Context) error })
	if !ok {
		t.Fatal("the environment has no Finish to take the labels off")
	}
	if err := f.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"cnperf-agent-dst", "cnperf-agent-src"} {
		if p, _ := kc.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{}); p.Labels[PolicyTargetLabel] != "" || p.Labels[PolicySourceLabel] != "" {
			t.Errorf("pod %s keeps policy labels after Finish: %v", pod, p.Labels)
		}
	}
}

// TestEnvPolicyRemovalWaitsForThePair: the undo of the last set on a pod
// returns once a new connection from the pair's source is allowed again
// (here from the third try on); the undo of a set with another still in
// place does not wait; a pair still blocked after the bound is an error
// naming the pair and the set.
func TestEnvPolicyRemovalWaitsForThePair(t *testing.T) {
	ctx := context.Background()
	srv := &connServer{allowFrom: 3}
	e, _ := policyEnv(srv)
	deny := suite.PolicySet{Deny: true, From: "cnperf-agent-src", Port: 5201}
	allow := suite.PolicySet{Count: 1, Selecting: 1, From: "cnperf-agent-src", Port: 5201}
	undoDeny, err := e.Apply(ctx, suite.Change{What: suite.CapNetworkPolicy, Member: "cnperf-agent-dst", Policy: &deny})
	if err != nil {
		t.Fatal(err)
	}
	undoAllow, err := e.Apply(ctx, suite.Change{What: suite.CapNetworkPolicy, Member: "cnperf-agent-dst", Policy: &allow})
	if err != nil {
		t.Fatal(err)
	}
	if err := undoAllow(ctx); err != nil || srv.count() != 0 {
		t.Fatalf("undo of the allow with the deny in place: %v, %d checks (want none)", err, srv.count())
	}
	if err := undoDeny(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.count() != 3 {
		t.Errorf("%d checks after the deny's removal, want 3 (allowed from the third)", srv.count())
	}
	if len(srv.tasks) == 0 {
		t.Fatal("no check task")
	}
	if task := srv.tasks[0]; task.Src != "u-cnperf-agent-src" || task.Dst != "u-cnperf-agent-dst" || task.Spec.Kind != probe.KindConnect || task.Spec.Target != "" {
		t.Errorf("check task %+v (spec %+v)", task, task.Spec)
	}

	old := policyRemovalTimeout
	policyRemovalTimeout = time.Second
	defer func() { policyRemovalTimeout = old }()
	e, _ = policyEnv(&connServer{})
	undo, err := e.Apply(ctx, suite.Change{What: suite.CapNetworkPolicy, Member: "cnperf-agent-dst", Policy: &deny})
	if err != nil {
		t.Fatal(err)
	}
	err = undo(ctx)
	for _, want := range []string{"policy set", "cnperf-agent-src", "cnperf-agent-dst", "10.0.0.1:5201", "deny true", "timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("undo with the pair still blocked: %v, want it to name %q", err, want)
		}
	}
}
