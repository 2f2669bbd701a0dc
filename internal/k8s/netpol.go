package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
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
// (suite.PolicySet: those that select the destination pod by
// PolicyTargetLabel, each allowing TCP from the pod labelled
// PolicySourceLabel to the port, the others selecting no pod and allowing
// TEST-NET addresses, and with Deny one that selects the destination and
// allows nothing). The pods are labelled apart (LabelPolicyPods), once
// for a run. It returns the set's id and its removal, which deletes the
// policies by label; on failure what was made is removed.
func (c *Client) CreatePolicies(ctx context.Context, p suite.PolicySet) (string, func(context.Context) error, error) {
	if err := p.Check(); err != nil {
		return "", nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	id := hex.EncodeToString(b)
	remove := func(ctx context.Context) error { return c.DeletePolicies(ctx, id) }
	fail := func(err error) (string, func(context.Context) error, error) {
		return id, nil, errors.Join(err, remove(context.WithoutCancel(ctx)))
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

// DeletePolicies deletes the set id's policies by label.
func (c *Client) DeletePolicies(ctx context.Context, id string) error {
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
		return errors.Join(append(errs, c.explain(err, "list networkpolicies "+sel.LabelSelector))...)
	}
	errs = nil // the collection delete's error, if any, is now moot
	for _, np := range left.Items {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		err := nps.Delete(rctx, np.Name, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, c.explain(err, "delete networkpolicy "+np.Name))
		}
	}
	return errors.Join(errs...)
}

// LabelPolicyPods puts PolicyTargetLabel on the pod dst and
// PolicySourceLabel on the pod src ("" for none), which the policies
// select them by.
func (c *Client) LabelPolicyPods(ctx context.Context, dst, src string) error {
	return c.policyLabels(ctx, dst, src, "true")
}

// UnlabelPolicyPods takes the policy labels off the pods dst and src (a
// pod already gone is no error).
func (c *Client) UnlabelPolicyPods(ctx context.Context, dst, src string) error {
	return c.policyLabels(ctx, dst, src, "")
}

func (c *Client) policyLabels(ctx context.Context, dst, src, value string) error {
	var errs []error
	for _, pk := range [][2]string{{dst, PolicyTargetLabel}, {src, PolicySourceLabel}} {
		if pk[0] == "" {
			continue
		}
		if err := c.labelPodWith(ctx, pk[0], pk[1], value); err != nil && (value != "" || !apierrors.IsNotFound(err)) {
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

// policyRemovalTimeout bounds the wait, after the last policy set on a
// pod is removed, for a new connection from its pair's source to be
// allowed again (a variable for tests); policyLabelTimeout the wait for
// the CNI to take the pair's new labels.
var policyRemovalTimeout = 30 * time.Second

const policyLabelTimeout = 2 * time.Minute

// policyPairs are the policy labels the environment put on pods for the
// suite run, and the policy sets in place per destination pod.
type policyPairs struct {
	mu       sync.Mutex        // guards the fields below
	labelled map[string]string // pod → the policy label put on it
	sets     map[string]int    // destination pod → its sets in place
}

// applyPolicies makes the change's NetworkPolicies (CreatePolicies) for
// the agent pod c.Member, allowing the agent pod c.Policy.From. The pair
// is labelled once for the whole run (Finish takes the labels off): a
// label change gives a pod a new security identity, which a CNI may take
// long to use (Cilium resolves it after a random delay of up to 30 s
// and a 5 s grace period, and defers every policy change of the pod
// meanwhile), so labelling per set would leave a set not yet enforced or
// a removed one still in force. The undo deletes the set's policies and,
// once no set is left on the pod, waits until a new connection from From
// is allowed again (waitAllowed). It refuses when the CNI enforces no
// policies.
func (e *Env) applyPolicies(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if ok, why := e.CNI.EnforcesNetworkPolicy(); !ok {
		return nil, errors.New(why)
	}
	if c.Policy == nil {
		return nil, errors.New("network-policy change without policies")
	}
	if err := c.Policy.Check(); err != nil {
		return nil, err
	}
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	dst := agentNamed(agents, c.Member)
	if dst == nil {
		return nil, fmt.Errorf("no agent pod %s to make policies for", c.Member)
	}
	var src *Agent
	if c.Policy.From != "" {
		if src = agentNamed(agents, c.Policy.From); src == nil {
			return nil, fmt.Errorf("no agent pod %s to allow", c.Policy.From)
		}
	}
	if err := e.labelPair(ctx, dst.Name, c.Policy.From); err != nil {
		return nil, err
	}
	id, remove, err := e.Client.CreatePolicies(ctx, *c.Policy)
	if err != nil {
		return nil, err
	}
	e.countSets(dst.Name, 1)
	set := fmt.Sprintf("policy set %s (%d policies, %d selecting %s, deny %v)", id, c.Policy.Count, c.Policy.Selecting, dst.Name, c.Policy.Deny)
	return func(ctx context.Context) error {
		err := remove(ctx)
		if left := e.countSets(dst.Name, -1); err != nil || left > 0 || src == nil {
			return err
		}
		return e.waitAllowed(ctx, *src, *dst, c.Policy.Port, set)
	}, nil
}

// countSets adds d to the sets in place on pod and returns how many are.
func (e *Env) countSets(pod string, d int) int {
	e.pol.mu.Lock()
	defer e.pol.mu.Unlock()
	if e.pol.sets == nil {
		e.pol.sets = map[string]int{}
	}
	e.pol.sets[pod] += d
	return e.pol.sets[pod]
}

// labelPair puts the policy labels on dst and src ("" for none) unless
// this run put them already, and waits until the CNI uses them.
func (e *Env) labelPair(ctx context.Context, dst, src string) error {
	e.pol.mu.Lock()
	if e.pol.labelled == nil {
		e.pol.labelled = map[string]string{}
	}
	fresh := map[string]string{}
	for pod, key := range map[string]string{dst: PolicyTargetLabel, src: PolicySourceLabel} {
		if pod == "" {
			continue
		}
		if had, ok := e.pol.labelled[pod]; ok {
			if had != key {
				e.pol.mu.Unlock()
				return fmt.Errorf("pod %s is labelled %s for this run's policies, not %s: a pod is either the destination or the source", pod, had, key)
			}
			continue
		}
		fresh[pod] = key
		e.pol.labelled[pod] = key
	}
	e.pol.mu.Unlock()
	if len(fresh) == 0 {
		return nil
	}
	for pod, key := range fresh {
		if err := e.Client.labelPodWith(ctx, pod, key, "true"); err != nil {
			return err
		}
	}
	return e.labelsInEffect(ctx, fresh)
}

// Finish implements suite.Finisher: it takes off the policy labels this
// run put on pods.
func (e *Env) Finish(ctx context.Context) error {
	e.pol.mu.Lock()
	labelled := e.pol.labelled
	e.pol.labelled, e.pol.sets = nil, nil
	e.pol.mu.Unlock()
	var errs []error
	for pod, key := range labelled {
		if err := e.Client.labelPodWith(ctx, pod, key, ""); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err) // a pod already gone is no error
		}
	}
	return errors.Join(errs...)
}

// ciliumEndpoints are Cilium's CiliumEndpoint objects: an agent pod's
// endpoint, its state and the labels of the security identity it uses.
var ciliumEndpoints = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumendpoints"}

// labelsInEffect waits, on Cilium, until each pod's CiliumEndpoint is
// ready with an identity that carries the pod's new label (key=true):
// only then does the datapath select the pod by it. Other CNIs take a
// label at once (Calico's Felix) and are not waited for; a cluster whose
// CiliumEndpoints cnperf may not read is not either.
func (e *Env) labelsInEffect(ctx context.Context, pods map[string]string) error {
	if e.CNI.Name != "cilium" || e.Client.Dynamic == nil {
		return nil
	}
	deadline := time.Now().Add(policyLabelTimeout)
	for pod, key := range pods {
		want := "k8s:" + key + "=true"
		for {
			rctx, cancel := context.WithTimeout(ctx, e.Client.timeout())
			ep, err := e.Client.Dynamic.Resource(ciliumEndpoints).Namespace(e.Client.NS()).Get(rctx, pod, metav1.GetOptions{})
			cancel()
			if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
				break // nothing to read (no CiliumEndpoints, or not ours to read): the removal check still stands
			}
			var state string
			var ids []string
			if err == nil {
				state, _, _ = unstructured.NestedString(ep.Object, "status", "state")
				ids, _, _ = unstructured.NestedStringSlice(ep.Object, "status", "identity", "labels")
				if state == "ready" && slices.Contains(ids, want) {
					break
				}
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("pod %s labelled %s: Cilium does not use it within %v (its CiliumEndpoint: state %q, identity labels %v, %v)",
					pod, key, policyLabelTimeout, state, ids, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitAllowed runs short connect samplers from src to dst's responder
// port until one connects: the pair is allowed again once a set's
// removal is in effect. Not within policyRemovalTimeout is an error
// naming the pair and the set.
func (e *Env) waitAllowed(ctx context.Context, src, dst Agent, port int, set string) error {
	deadline := time.Now().Add(policyRemovalTimeout)
	excl := false
	// The server aims the task at dst's responder (port).
	target := net.JoinHostPort(dst.IP, strconv.Itoa(port))
	spec := probe.Spec{Kind: probe.KindConnect, Duration: probe.Duration(500 * time.Millisecond),
		Interval: probe.Duration(20 * time.Millisecond), Timeout: probe.Duration(400 * time.Millisecond)}
	last := "none tried"
	for try := 1; ; try++ {
		run, err := e.Server.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: src.UID, Dst: dst.UID,
			Type: api.TypeProbe, Spec: &spec, Exclusive: &excl}}})
		if err != nil {
			return fmt.Errorf("%s removed: check %s → %s: %w", set, src.Name, dst.Name, err)
		}
		run, err = e.waitRun(ctx, run, policyRemovalTimeout, "policy removal check")
		ok, why := connected(run, err)
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s removed, but %s still cannot open a connection to %s (%s) after %v, %d tries (last: %s)",
				set, src.Name, dst.Name, target, policyRemovalTimeout, try, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// connected says whether a connect sampler's run connected at least
// once, and if not, why.
func connected(run api.Run, err error) (bool, string) {
	switch {
	case err != nil:
		return false, err.Error()
	case len(run.Tasks) != 1:
		return false, fmt.Sprintf("%d tasks", len(run.Tasks))
	case run.Tasks[0].State != api.StateSucceeded:
		return false, run.Tasks[0].State + ": " + run.Tasks[0].Reason
	}
	var r probe.Result
	if err := json.Unmarshal(run.Tasks[0].Result, &r); err != nil || r.Connects == nil {
		return false, fmt.Sprintf("no connect timeline (%v)", err)
	}
	if r.Connects.Outcomes[probe.ConnectOK] > 0 {
		return true, ""
	}
	return false, fmt.Sprintf("connects %v", r.Connects.Outcomes)
}
