package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cnperf/cnperf/internal/suite"
)

// Labels of the NetworkPolicies cnperf makes for a run (suite netpol).
const (
	// PolicySetLabel marks every policy of one set (the value is the
	// set's id): `kubectl -n cnperf delete networkpolicy -l
	// cnperf.io/netpol-set` removes what a killed run left.
	PolicySetLabel = "cnperf.io/netpol-set"
	// PolicyTargetLabel ("true") is put on the destination agent pod;
	// the policies that select it select it by this label.
	PolicyTargetLabel = "cnperf.io/netpol-target"
	// PolicySourceLabel ("true") is put on the source agent pod; the
	// policies that select the destination allow it by this label.
	PolicySourceLabel = "cnperf.io/netpol-source"
	// policyNoneLabel is selected by the policies that select no pod:
	// no pod carries it.
	policyNoneLabel = "cnperf.io/netpol-none"
)

// policyWorkers make a set's policies at once; policyQPS bounds the
// requests a second (client-go's default of 5 would take over 3 minutes
// for 1,000 policies).
const (
	policyWorkers = 4
	policyQPS     = 50
)

// CreatePolicies makes the set's NetworkPolicies in cnperf's namespace
// (suite.PolicySet: those that select the pod dst, each allowing TCP from
// the pod src to the port, the others selecting no pod and allowing
// TEST-NET addresses, and with Deny one that selects dst and allows
// nothing), labelling dst and src so the policies can select them. It
// returns the set's id and its removal, which deletes the policies by
// label and takes the labels off the pods; on failure what was made is
// removed.
func (c *Client) CreatePolicies(ctx context.Context, dst, src string, p suite.PolicySet) (string, func(context.Context) error, error) {
	if err := p.Check(); err != nil {
		return "", nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	id := hex.EncodeToString(b)
	remove := func(ctx context.Context) error { return c.DeletePolicies(ctx, id, dst, src) }
	fail := func(err error) (string, func(context.Context) error, error) {
		return id, nil, errors.Join(err, remove(context.WithoutCancel(ctx)))
	}
	if p.Selecting > 0 || p.Deny {
		if err := c.labelPodWith(ctx, dst, PolicyTargetLabel, "true"); err != nil {
			return fail(err)
		}
	}
	if p.Selecting > 0 {
		if err := c.labelPodWith(ctx, src, PolicySourceLabel, "true"); err != nil {
			return fail(err)
		}
	}
	pols := policyObjects(c.NS(), id, p)
	kube := c.fasterKube()
	jobs := make(chan *networkingv1.NetworkPolicy)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range policyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for np := range jobs {
				rctx, cancel := context.WithTimeout(ctx, c.timeout())
				_, err := kube.NetworkingV1().NetworkPolicies(c.NS()).Create(rctx, np, metav1.CreateOptions{})
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, c.explain(err, "create networkpolicy "+np.Name))
					mu.Unlock()
				}
			}
		}()
	}
	for _, np := range pols {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		jobs <- np
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return fail(err)
	}
	return id, remove, nil
}

// DeletePolicies deletes the set id's policies by label and takes the
// policy labels off the pods dst and src (a pod already gone is no error).
func (c *Client) DeletePolicies(ctx context.Context, id, dst, src string) error {
	var errs []error
	sel := metav1.ListOptions{LabelSelector: PolicySetLabel + "=" + id}
	nps := c.Kube.NetworkingV1().NetworkPolicies(c.NS())
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	err := nps.DeleteCollection(rctx, metav1.DeleteOptions{}, sel)
	cancel()
	if err != nil {
		errs = append(errs, c.explain(err, "delete networkpolicies "+sel.LabelSelector))
	}
	// What is still listed (a client without collection deletes) goes one
	// by one.
	rctx, cancel = context.WithTimeout(ctx, c.timeout())
	left, err := nps.List(rctx, sel)
	cancel()
	if err != nil {
		errs = append(errs, c.explain(err, "list networkpolicies "+sel.LabelSelector))
	} else {
		errs = nil // the collection delete's error, if any, is now moot
		for _, np := range left.Items {
			rctx, cancel := context.WithTimeout(ctx, c.timeout())
			err := nps.Delete(rctx, np.Name, metav1.DeleteOptions{})
			cancel()
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, c.explain(err, "delete networkpolicy "+np.Name))
			}
		}
	}
	for pod, key := range map[string]string{dst: PolicyTargetLabel, src: PolicySourceLabel} {
		if pod == "" {
			continue
		}
		if err := c.labelPodWith(ctx, pod, key, ""); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CountPolicies counts the NetworkPolicies cnperf made (any set) in its
// namespace.
func (c *Client) CountPolicies(ctx context.Context) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	l, err := c.Kube.NetworkingV1().NetworkPolicies(c.NS()).List(rctx, metav1.ListOptions{LabelSelector: PolicySetLabel})
	if err != nil {
		return 0, c.explain(err, "list networkpolicies")
	}
	return len(l.Items), nil
}

// fasterKube is the client with a higher request rate for making many
// policies, or the client itself when it was not made from a config.
func (c *Client) fasterKube() kubernetes.Interface {
	if c.REST == nil {
		return c.Kube
	}
	rc := *c.REST
	rc.QPS, rc.Burst = policyQPS, 2*policyQPS
	k, err := kubernetes.NewForConfig(&rc)
	if err != nil {
		return c.Kube
	}
	return k
}

// policyObjects renders the set as NetworkPolicy objects.
func policyObjects(ns, id string, p suite.PolicySet) []*networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	meta := func(i int) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: fmt.Sprintf("cnperf-np-%s-%d", id, i), Namespace: ns, Labels: map[string]string{
			PolicySetLabel: id, "app.kubernetes.io/part-of": "cnperf", "app.kubernetes.io/managed-by": "cnperf"}}
	}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	target := metav1.LabelSelector{MatchLabels: map[string]string{PolicyTargetLabel: "true"}}
	var out []*networkingv1.NetworkPolicy
	for i := 0; i < p.Count; i++ {
		np := &networkingv1.NetworkPolicy{ObjectMeta: meta(i), Spec: networkingv1.NetworkPolicySpec{PolicyTypes: ingress}}
		if i < p.Selecting {
			port := intstr.FromInt32(int32(p.Port))
			np.Spec.PodSelector = target
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{PolicySourceLabel: "true"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}}
		} else {
			k := i - p.Selecting
			port := intstr.FromInt32(int32(1024 + k%64000))
			np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{policyNoneLabel: "true"}}
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.0.2.%d/32", 1+k%254)}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}}
		}
		out = append(out, np)
	}
	if p.Deny {
		// Selects the pod and allows nothing: with no other policy
		// allowing, every new connection to it is dropped.
		out = append(out, &networkingv1.NetworkPolicy{ObjectMeta: meta(p.Count), Spec: networkingv1.NetworkPolicySpec{PodSelector: target, PolicyTypes: ingress}})
	}
	return out
}

// labelPodWith sets the label key on the pod to value ("" removes it).
func (c *Client) labelPodWith(ctx context.Context, pod, key, value string) error {
	var v any = value
	if value == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if _, err := c.Kube.CoreV1().Pods(c.NS()).Patch(rctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("label pod %s: %w", pod, err)
		}
		return c.explain(err, "label pod "+pod+" "+key)
	}
	return nil
}

// applyPolicies makes the change's NetworkPolicies (CreatePolicies) for
// the agent pod c.Member, allowing the agent pod c.Policy.From; the undo
// deletes them. It refuses when the CNI enforces no policies.
func (e *Env) applyPolicies(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if ok, why := e.CNI.EnforcesNetworkPolicy(); !ok {
		return nil, errors.New(why)
	}
	if c.Policy == nil {
		return nil, errors.New("network-policy change without policies")
	}
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	if agentNamed(agents, c.Member) == nil {
		return nil, fmt.Errorf("no agent pod %s to make policies for", c.Member)
	}
	src := ""
	if c.Policy.Selecting > 0 {
		if agentNamed(agents, c.Policy.From) == nil {
			return nil, fmt.Errorf("no agent pod %s to allow", c.Policy.From)
		}
		src = c.Policy.From
	}
	_, undo, err := e.Client.CreatePolicies(ctx, c.Member, src, *c.Policy)
	return undo, err
}
