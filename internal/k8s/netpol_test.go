package k8s

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnperf/cnperf/internal/suite"
)

func policyPods() (*corev1.Pod, *corev1.Pod) {
	mk := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "cnperf-agent"}}}
	}
	return mk("cnperf-agent-dst"), mk("cnperf-agent-src")
}

func listPolicies(t *testing.T, kc *fake.Clientset) []networkingv1.NetworkPolicy {
	t.Helper()
	l, err := kc.NetworkingV1().NetworkPolicies(Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestCreatePolicies: a set makes Count NetworkPolicies, Selecting of
// them selecting the destination pod by its label and allowing TCP to the
// port from the source pod by its label, the others selecting no pod;
// Deny adds one that selects the pod and allows nothing. The removal
// deletes every policy of the set and leaves the pods' labels alone.
func TestCreatePolicies(t *testing.T) {
	for _, tc := range []struct {
		name           string
		set            suite.PolicySet
		want, selectin int
	}{
		{"pair", suite.PolicySet{Count: 10, Selecting: 10, From: "cnperf-agent-src", Port: 5201}, 10, 10},
		{"other", suite.PolicySet{Count: 10}, 10, 0},
		{"deny", suite.PolicySet{Count: 1, Deny: true}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, src := policyPods()
			kc := fake.NewClientset(dst, src)
			c := NewForInterfaces(kc, nil)
			ctx := context.Background()
			if err := c.LabelPolicyPods(ctx, dst.Name, src.Name); err != nil {
				t.Fatal(err)
			}
			_, remove, err := c.CreatePolicies(ctx, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			pols := listPolicies(t, kc)
			selecting := 0
			for _, np := range pols {
				if np.Labels[PolicySetLabel] == "" {
					t.Errorf("policy %s has no set label", np.Name)
				}
				if np.Spec.PodSelector.MatchLabels[PolicyTargetLabel] != "true" {
					continue
				}
				selecting++
				if tc.set.Selecting > 0 {
					in := np.Spec.Ingress
					if len(in) != 1 || in[0].From[0].PodSelector.MatchLabels[PolicySourceLabel] != "true" || in[0].Ports[0].Port.IntValue() != 5201 {
						t.Errorf("policy %s ingress %+v, want TCP 5201 from the source's label", np.Name, in)
					}
				} else if len(np.Spec.Ingress) != 0 {
					t.Errorf("deny policy %s allows %+v", np.Name, np.Spec.Ingress)
				}
			}
			if len(pols) != tc.want || selecting != tc.selectin {
				t.Errorf("%d policies, %d selecting the pod; want %d, %d", len(pols), selecting, tc.want, tc.selectin)
			}
			if n, err := c.CountPolicies(ctx); err != nil || n != tc.want {
				t.Errorf("CountPolicies = %d, %v", n, err)
			}
			if err := remove(ctx); err != nil {
				t.Fatal(err)
			}
			if left := listPolicies(t, kc); len(left) != 0 {
				t.Errorf("%d policies left after removal", len(left))
			}
			if p, _ := kc.CoreV1().Pods(Namespace).Get(ctx, dst.Name, metav1.GetOptions{}); p.Labels[PolicyTargetLabel] != "true" {
				t.Errorf("the set's removal took the destination's label: %v", p.Labels)
			}
			if err := c.UnlabelPolicyPods(ctx, dst.Name, src.Name); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{dst.Name, src.Name} {
				p, _ := kc.CoreV1().Pods(Namespace).Get(ctx, name, metav1.GetOptions{})
				if p.Labels[PolicyTargetLabel] != "" || p.Labels[PolicySourceLabel] != "" {
					t.Errorf("pod %s keeps policy labels %v", name, p.Labels)
				}
			}
		})
	}
}

// TestCreatePoliciesFailureRemovesWhatWasMade: when the API refuses a
// policy part way, the error says so and nothing of the set is left.
func TestCreatePoliciesFailureRemovesWhatWasMade(t *testing.T) {
	dst, src := policyPods()
	kc := fake.NewClientset(dst, src)
	var n atomic.Int32
	kc.PrependReactor("create", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		if n.Add(1) == 7 {
			return true, nil, errors.New("quota exceeded")
		}
		return false, nil, nil
	})
	c := NewForInterfaces(kc, nil)
	ctx := context.Background()
	_, remove, err := c.CreatePolicies(ctx, suite.PolicySet{Count: 50, Selecting: 5, From: src.Name, Port: 5201})
	if err == nil || !strings.Contains(err.Error(), "quota exceeded") || remove != nil {
		t.Fatalf("err %v (remove %v), want the API's refusal", err, remove != nil)
	}
	if left := listPolicies(t, kc); len(left) != 0 {
		t.Errorf("%d policies left after a failed set", len(left))
	}
}

// TestEnvPoliciesOnlyWhereEnforced: on Calico the environment offers
// NetworkPolicies and makes them; on Flannel it refuses with the reason.
func TestEnvPoliciesOnlyWhereEnforced(t *testing.T) {
	if caps := (&Env{CNI: CNI{Name: "calico"}}).Caps(); !caps.Has(suite.CapNetworkPolicy) {
		t.Errorf("calico: no network-policy capability (%q)", caps.Reason(suite.CapNetworkPolicy))
	}
	e := &Env{CNI: CNI{Name: "flannel"}, Client: NewForInterfaces(fake.NewClientset(), nil)}
	_, err := e.Apply(context.Background(), suite.Change{What: suite.CapNetworkPolicy, Member: "x", Policy: &suite.PolicySet{Count: 1}})
	if err == nil || !strings.Contains(err.Error(), "flannel, does not enforce NetworkPolicy") {
		t.Errorf("flannel apply: %v", err)
	}
}
