package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Names the manifests use.
const (
	ServerName   = "cnperf-server"
	TokensSecret = "cnperf-tokens"
	// TokenReviewBinding is the name of the ClusterRoleBinding that lets
	// the server review agents' tokens, without its "-NAMESPACE" suffix.
	TokenReviewBinding = "cnperf-server-token-review"
	// AgentSelector selects every agent pod (all three DaemonSets and
	// the shaped agents of the shaping suite).
	AgentSelector = "app.kubernetes.io/name=cnperf-agent"
	fieldManager  = "cnperf"
)

// resources maps the kinds of the base to their API resources.
var resources = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"Namespace":             {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false},
	"ServiceAccount":        {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"Service":               {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
	"Secret":                {schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true},
	"PersistentVolumeClaim": {schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, true},
	"Deployment":            {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
	"DaemonSet":             {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, true},
	"PodDisruptionBudget":   {schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, true},
	"Role":                  {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	"ClusterRole":           {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	"ClusterRoleBinding":    {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
}

// Deploy applies the manifests with server-side apply, creates the token
// Secret with random tokens when it does not exist, with opts.TLS keeps a
// CA and a serving certificate (EnsureTLS) and stamps their hashes on the
// pod templates (a rotated certificate rolls the pods), and, when wait > 0,
// waits until the server and every agent are ready. log gets one line per
// object.
func (c *Client) Deploy(ctx context.Context, opts DeployOptions, wait time.Duration, log io.Writer) error {
	objs, err := Render(opts)
	if err != nil {
		return err
	}
	for i, obj := range objs {
		u, err := ToUnstructured(obj)
		if err != nil {
			return err
		}
		if c.NS() != Namespace { // another namespace than the manifests'
			if u.GetKind() == "Namespace" {
				u.SetName(c.NS())
			} else if u.GetNamespace() != "" {
				u.SetNamespace(c.NS())
			}
			if u.GetKind() == "ClusterRoleBinding" {
				if err := toNamespace(u, c.NS()); err != nil {
					return err
				}
			}
		}
		r, ok := resources[u.GetKind()]
		if !ok {
			return fmt.Errorf("manifest kind %s: cnperf does not know how to apply it", u.GetKind())
		}
		body, err := json.Marshal(u.Object)
		if err != nil {
			return fmt.Errorf("encode %s/%s: %w", u.GetKind(), u.GetName(), err)
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		ri := c.Dynamic.Resource(r.gvr)
		po := metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTo(true)}
		if r.namespaced {
			_, err = ri.Namespace(u.GetNamespace()).Patch(rctx, u.GetName(), types.ApplyPatchType, body, po)
		} else {
			_, err = ri.Patch(rctx, u.GetName(), types.ApplyPatchType, body, po)
		}
		cancel()
		if err != nil {
			return c.explain(err, fmt.Sprintf("apply %s %s", strings.ToLower(u.GetKind()), u.GetName()))
		}
		fmt.Fprintf(log, "%s/%s applied\n", strings.ToLower(u.GetKind()), u.GetName())
		if i == 0 && u.GetKind() == "Namespace" {
			created, err := c.ensureTokens(ctx)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(log, "secret/%s created with random tokens (read user-token from it for the CLI)\n", TokensSecret)
			}
			if err := c.ensurePullSecret(ctx, opts, log); err != nil {
				return err
			}
			if opts.TLS {
				hosts, err := c.TLSHosts(ctx, opts.NodePort > 0)
				if err != nil {
					return err
				}
				st, err := c.EnsureTLS(ctx, hosts, time.Now(), log)
				if err != nil {
					return err
				}
				for _, o := range objs[1:] {
					annotateTLS(o, st.ServingHash, st.CAHash)
				}
			}
		}
	}
	if !opts.HostAgents {
		if err := c.removeHostAgents(ctx, log); err != nil {
			return err
		}
	}
	if wait <= 0 {
		return nil
	}
	return c.WaitReady(ctx, wait)
}

// HostAgentsName is the host-network agent DaemonSet of the host-agents
// opt-in.
const HostAgentsName = "cnperf-agent-host"

// removeHostAgents deletes the host-network agent DaemonSet an earlier
// deploy with HostAgents left: applying the objects without it would keep
// it running in a namespace now labelled restricted, where its pods could
// not even be recreated.
func (c *Client) removeHostAgents(ctx context.Context, log io.Writer) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	err := c.Kube.AppsV1().DaemonSets(c.NS()).Delete(rctx, HostAgentsName, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return c.explain(err, "delete daemonset "+HostAgentsName+" (deployed without --host-agents)")
	}
	fmt.Fprintf(log, "daemonset/%s deleted (deployed without --host-agents)\n", HostAgentsName)
	return nil
}

// toNamespace moves a ClusterRoleBinding of the base (named NAME-cnperf,
// binding accounts of namespace cnperf) to namespace ns: its name ends in
// ns, and its subjects in namespace cnperf are those of ns.
func toNamespace(u *unstructured.Unstructured, ns string) error {
	u.SetName(strings.TrimSuffix(u.GetName(), "-"+Namespace) + "-" + ns) // TokenReviewBinding-ns
	subjects, _, err := unstructured.NestedSlice(u.Object, "subjects")
	if err != nil {
		return fmt.Errorf("clusterrolebinding %s: subjects: %w", u.GetName(), err)
	}
	for _, sub := range subjects {
		if m, ok := sub.(map[string]any); ok && m["namespace"] == Namespace {
			m["namespace"] = ns
		}
	}
	return unstructured.SetNestedSlice(u.Object, subjects, "subjects")
}

// ensurePullSecret writes opts.PullSecretConfig into the Secret
// opts.ImagePullSecret, or, without it, checks that the Secret exists: a
// missing one would leave every pod in ImagePullBackOff.
func (c *Client) ensurePullSecret(ctx context.Context, opts DeployOptions, log io.Writer) error {
	name := opts.ImagePullSecret
	if name == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	secrets := c.Kube.CoreV1().Secrets(c.NS())
	if opts.PullSecretConfig == nil {
		s, err := secrets.Get(rctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("image pull secret %s: not in namespace %s (create it with kubectl create secret docker-registry, or let deploy make it with --create-image-pull-secret)", name, c.NS())
		}
		if err != nil {
			return c.explain(err, "get secret "+name)
		}
		if s.Type != corev1.SecretTypeDockerConfigJson && s.Type != corev1.SecretTypeDockercfg {
			return fmt.Errorf("image pull secret %s: type %s, want %s", name, s.Type, corev1.SecretTypeDockerConfigJson)
		}
		return nil
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.NS(),
			Labels: map[string]string{"app.kubernetes.io/part-of": "cnperf"}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: opts.PullSecretConfig},
	}
	_, err := secrets.Create(rctx, s, metav1.CreateOptions{FieldManager: fieldManager})
	verb := "created"
	if apierrors.IsAlreadyExists(err) {
		verb = "replaced"
		_, err = secrets.Update(rctx, s, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	if err != nil {
		return c.explain(err, "write secret "+name)
	}
	fmt.Fprintf(log, "secret/%s %s with the registry credentials of the local Docker config\n", name, verb)
	return nil
}

// ensureTokens creates the token Secret when missing; it reports whether it
// made one.
func (c *Client) ensureTokens(ctx context.Context) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	_, err := c.Kube.CoreV1().Secrets(c.NS()).Get(rctx, TokensSecret, metav1.GetOptions{})
	if err == nil {
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, c.explain(err, "get secret "+TokensSecret)
	}
	// The user token only: agents present ServiceAccount tokens, so no
	// shared agent secret exists in the cluster.
	user, err := randomToken()
	if err != nil {
		return false, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TokensSecret, Namespace: c.NS(),
			Labels: map[string]string{"app.kubernetes.io/part-of": "cnperf"}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{"user-token": user},
	}
	if _, err := c.Kube.CoreV1().Secrets(c.NS()).Create(rctx, s, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return false, c.explain(err, "create secret "+TokensSecret)
	}
	return true, nil
}

// UserTokenKey is the token Secret's key of the user token.
const UserTokenKey = "user-token"

// TokenCommand is the kubectl command that prints the user token kept in
// Secret secret of namespace ns.
func TokenCommand(ns, secret string) string {
	return fmt.Sprintf("kubectl -n %s get secret %s -o jsonpath='{.data.%s}' | base64 -d", ns, secret, UserTokenKey)
}

// UserTokenSecret names the Secret the server's user token comes from:
// the one its Deployment's CNPERF_USER_TOKEN refers to (the chart's
// auth.existingSecret, say), or TokensSecret when that cannot be read.
func (c *Client) UserTokenSecret(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	d, err := c.Kube.AppsV1().Deployments(c.NS()).Get(rctx, ServerName, metav1.GetOptions{})
	if err != nil {
		return TokensSecret
	}
	for _, ct := range d.Spec.Template.Spec.Containers {
		for _, e := range ct.Env {
			if e.Name == "CNPERF_USER_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "" {
				return e.ValueFrom.SecretKeyRef.Name
			}
		}
	}
	return TokensSecret
}

// Tokens reads the user token from the token Secret (UserTokenSecret), and the agent join
// token where a Secret of an earlier cnperf still holds one ("" otherwise:
// agents authenticate with ServiceAccount tokens).
func (c *Client) Tokens(ctx context.Context) (user, agent string, err error) {
	name := c.UserTokenSecret(ctx)
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	s, err := c.Kube.CoreV1().Secrets(c.NS()).Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", c.explain(err, "get secret "+name)
	}
	return string(s.Data[UserTokenKey]), string(s.Data["agent-token"]), nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// WaitReady waits until the server Deployment is available and every agent
// DaemonSet has a ready pod on each node it schedules to. On timeout the
// error names the pods that are not ready and why.
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		st, err := c.Status(ctx)
		switch {
		case err != nil:
			last = err
		case st.Ready():
			return nil
		default:
			last = errors.New(st.NotReady())
		}
		select {
		case <-ctx.Done():
			why := c.podProblems(context.WithoutCancel(ctx))
			return fmt.Errorf("not ready after %v: %v%s", timeout, last, why)
		case <-time.After(time.Second):
		}
	}
}

// Status is what is deployed and how ready it is.
type Status struct {
	Namespace string `json:"-"`
	// NamespaceExists: the namespace is there, whatever it holds.
	NamespaceExists bool `json:"-"`
	// Deployed: the namespace holds cnperf's server Deployment or an
	// agent DaemonSet (an empty namespace, e.g. one `helm install
	// --create-namespace` left, is not a deployment).
	Deployed   bool
	Server     Workload
	DaemonSets []Workload
	Agents     []Agent
}

// Workload is a Deployment or DaemonSet and its ready count.
type Workload struct {
	Name           string
	Desired, Ready int32
}

// Ready reports whether the server and all agents are ready.
func (s Status) Ready() bool {
	if !s.Deployed || s.Server.Desired == 0 || s.Server.Ready < s.Server.Desired || len(s.DaemonSets) == 0 {
		return false
	}
	for _, d := range s.DaemonSets {
		if d.Desired == 0 || d.Ready < d.Desired {
			return false
		}
	}
	return true
}

// NotReady says what is not ready yet.
func (s Status) NotReady() string {
	if !s.Deployed {
		ns := s.Namespace
		if ns == "" {
			ns = Namespace
		}
		if s.NamespaceExists {
			return "cnperf is not deployed in namespace " + ns + " (no " + ServerName + " Deployment, no agent DaemonSets)"
		}
		return "cnperf is not deployed (no namespace " + ns + ")"
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("server %d/%d ready", s.Server.Ready, s.Server.Desired))
	for _, d := range s.DaemonSets {
		parts = append(parts, fmt.Sprintf("%s %d/%d ready", d.Name, d.Ready, d.Desired))
	}
	return strings.Join(parts, ", ")
}

// Status reads the state of the deployment.
func (c *Client) Status(ctx context.Context) (Status, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	st := Status{Namespace: c.NS()}
	if _, err := c.Kube.CoreV1().Namespaces().Get(rctx, c.NS(), metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return st, nil
		}
		return st, c.explain(err, "get namespace "+c.NS())
	}
	st.NamespaceExists = true
	d, err := c.Kube.AppsV1().Deployments(c.NS()).Get(rctx, ServerName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return st, c.explain(err, "get deployment "+ServerName)
	default:
		st.Deployed = true
		st.Server = deploymentWorkload(d)
	}
	dss, err := c.Kube.AppsV1().DaemonSets(c.NS()).List(rctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return st, c.explain(err, "list daemonsets")
	}
	for _, ds := range dss.Items {
		st.Deployed = true
		st.DaemonSets = append(st.DaemonSets, workloadOf(&ds))
	}
	sort.Slice(st.DaemonSets, func(i, j int) bool { return st.DaemonSets[i].Name < st.DaemonSets[j].Name })
	st.Agents, err = c.Agents(ctx)
	if err != nil {
		return st, err
	}
	return st, nil
}

// deploymentWorkload counts the server's ready replicas as `kubectl
// rollout status` does: only pods of the current template that are
// available, and none while the controller has not yet seen the latest
// change (a deploy that just rotated the certificate must not read the
// old pod as the rolled-out one).
func deploymentWorkload(d *appsv1.Deployment) Workload {
	ready := min(d.Status.AvailableReplicas, d.Status.UpdatedReplicas)
	if d.Status.ObservedGeneration < d.Generation {
		ready = 0
	}
	return Workload{Name: d.Name, Desired: deref(d.Spec.Replicas, 1), Ready: ready}
}

func workloadOf(ds *appsv1.DaemonSet) Workload {
	ready := ds.Status.NumberReady
	if ds.Status.UpdatedNumberScheduled < ready {
		ready = ds.Status.UpdatedNumberScheduled
	}
	if ds.Status.ObservedGeneration < ds.Generation {
		ready = 0
	}
	return Workload{Name: ds.Name, Desired: ds.Status.DesiredNumberScheduled, Ready: ready}
}

// podProblems lists the namespace's pods that are not ready, with the
// reason kubelet or the scheduler gives.
func (c *Client) podProblems(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	pods, err := c.Kube.CoreV1().Pods(c.NS()).List(rctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var lines []string
	for i := range pods.Items {
		if why := PodProblem(&pods.Items[i]); why != "" {
			lines = append(lines, fmt.Sprintf("pod %s: %s", pods.Items[i].Name, why))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "; " + strings.Join(lines, "; ")
}

// PodProblem says why a pod is not ready ("" when it is).
func PodProblem(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "being deleted"
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("not scheduled: %s %s", cond.Reason, cond.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			msg := fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, w.Message)
			if t := cs.LastTerminationState.Terminated; t != nil {
				msg += fmt.Sprintf(" (last exit %d: %s)", t.ExitCode, strings.TrimSpace(t.Message))
			}
			return msg
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		return fmt.Sprintf("failed: %s %s", p.Status.Reason, p.Status.Message)
	}
	if p.Status.Phase == corev1.PodSucceeded {
		return ""
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
			return fmt.Sprintf("not ready (phase %s) %s", p.Status.Phase, cond.Message)
		}
	}
	if p.Status.Phase == corev1.PodPending {
		return "pending"
	}
	return ""
}

// Undeploy removes the namespace (and with it every cnperf object in it,
// test pods included) and the cluster role, and waits up to timeout until
// the namespace is gone. Nothing deployed is not an error.
func (c *Client) Undeploy(ctx context.Context, timeout time.Duration, log io.Writer) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	err := c.Kube.RbacV1().ClusterRoles().Delete(rctx, "cnperf-cluster-reader", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.explain(err, "delete clusterrole cnperf-cluster-reader")
	}
	review := TokenReviewBinding + "-" + c.NS()
	err = c.Kube.RbacV1().ClusterRoleBindings().Delete(rctx, review, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.explain(err, "delete clusterrolebinding "+review)
	}
	err = c.Kube.CoreV1().Namespaces().Delete(rctx, c.NS(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(log, "namespace/%s not found: nothing to remove\n", c.NS())
		return nil
	}
	if err != nil {
		return c.explain(err, "delete namespace "+c.NS())
	}
	fmt.Fprintf(log, "namespace/%s deleting\n", c.NS())
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	for {
		gctx, gcancel := context.WithTimeout(wctx, c.timeout())
		_, err := c.Kube.CoreV1().Namespaces().Get(gctx, c.NS(), metav1.GetOptions{})
		gcancel()
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(log, "namespace/%s removed\n", c.NS())
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("namespace %s still terminating after %v%s", c.NS(), timeout, c.podProblems(context.WithoutCancel(ctx)))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
