package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/qosspec"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations of the CNI bandwidth plugin.
const (
	IngressBandwidth = "kubernetes.io/ingress-bandwidth"
	EgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// Calico's own bandwidth annotations (libcalico-go's conversion: they
// override the kubernetes.io ones; without qos.projectcalico.org/*Burst
// the burst is 4 Gibit, 512 MiB).
const (
	CalicoIngressBandwidth = "qos.projectcalico.org/ingressBandwidth"
	CalicoEgressBandwidth  = "qos.projectcalico.org/egressBandwidth"
)

// TestPodLabel marks the short-lived pods cnperf makes, so they can be
// found and removed.
const TestPodLabel = "cnperf.io/test-pod"

// TestPod describes a short-lived pod placed on one node.
type TestPod struct {
	Name        string // full name; must be a DNS-1123 label
	Node        string // the node it must run on
	HostNetwork bool
	Annotations map[string]string
	Labels      map[string]string
	// Container is the pod's one container; its name defaults to "main".
	Container corev1.Container
	// Init, when set, runs before Container (e.g. to read the pod's link).
	Init *corev1.Container
	// OneShot pods run to completion; others must become Ready.
	OneShot bool
	// Volumes for hostPath mounts of inspectors.
	Volumes []corev1.Volume
	// Security is the pod's security context (a shaped agent takes the
	// agent DaemonSet's, so it runs under the namespace's Pod Security
	// level as the agents do).
	Security *corev1.PodSecurityContext
}

// Validate checks the pod description before anything is created.
func (t TestPod) Validate() error {
	var errs []error
	for _, msg := range validation.IsDNS1123Label(t.Name) {
		errs = append(errs, fmt.Errorf("pod name %q: %s", t.Name, msg))
	}
	if t.Node == "" {
		errs = append(errs, errors.New("node: must name the node the pod runs on"))
	}
	if t.Container.Image == "" {
		errs = append(errs, errors.New("image: must be set"))
	}
	for _, k := range []string{IngressBandwidth, EgressBandwidth, CalicoIngressBandwidth, CalicoEgressBandwidth} {
		if v, ok := t.Annotations[k]; ok {
			if _, err := qosspec.ParseBandwidth(v); err != nil {
				errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
			}
		}
	}
	return errors.Join(errs...)
}

// RunPod validates t, checks that its node exists and is Ready, creates the
// pod pinned to that node, and waits up to timeout until it is Ready (or,
// for OneShot pods, has finished). On any failure the pod is deleted and the
// error says why it did not run.
func (c *Client) RunPod(ctx context.Context, t TestPod, timeout time.Duration) (*corev1.Pod, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if _, err := c.Node(ctx, t.Node); err != nil {
		return nil, err
	}
	pod := t.pod()
	pod.Namespace = c.NS()
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	_, err := c.Kube.CoreV1().Pods(c.NS()).Create(rctx, pod, metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	if err != nil {
		return nil, c.explain(err, "create pod "+t.Name)
	}
	p, err := c.waitPod(ctx, t.Name, t.OneShot, timeout)
	if err != nil {
		derr := c.DeletePod(context.WithoutCancel(ctx), t.Name)
		return nil, errors.Join(err, derr)
	}
	return p, nil
}

func (t TestPod) pod() *corev1.Pod {
	labels := map[string]string{TestPodLabel: "true", "app.kubernetes.io/part-of": "cnperf"}
	for k, v := range t.Labels {
		labels[k] = v
	}
	ctr := t.Container
	if ctr.Name == "" {
		ctr.Name = "main"
	}
	if ctr.TerminationMessagePolicy == "" {
		ctr.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}
	restart := corev1.RestartPolicyAlways
	if t.OneShot {
		restart = corev1.RestartPolicyNever
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: Namespace, Labels: labels, Annotations: t.Annotations},
		Spec: corev1.PodSpec{
			// Placed by the scheduler with a required affinity to the node's
			// name, like DaemonSet pods: a pod that cannot run there says why
			// in its PodScheduled condition instead of waiting silently.
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{t.Node}}}}}}}},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			HostNetwork:                   t.HostNetwork,
			RestartPolicy:                 restart,
			AutomountServiceAccountToken:  ptrTo(false),
			ServiceAccountName:            "cnperf-agent",
			TerminationGracePeriodSeconds: ptrTo(int64(5)),
			Containers:                    []corev1.Container{ctr},
			Volumes:                       t.Volumes,
			SecurityContext:               t.Security,
		},
	}
	if t.HostNetwork {
		p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	if t.Init != nil {
		ic := *t.Init
		if ic.TerminationMessagePolicy == "" {
			ic.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		}
		p.Spec.InitContainers = []corev1.Container{ic}
	}
	return p
}

// ErrHostPathMissing means a pod's hostPath volume names a path the node
// does not have as the volume's type says (the kubelet's FailedMount
// "hostPath type check failed"): no waiting mends it.
var ErrHostPathMissing = errors.New("a hostPath volume's path is not on the node")

// waitPod polls the pod until it is Ready (or finished, for one-shot pods),
// fails, or timeout passes. While the pod is pending it reads the pod's
// Warning events every few seconds: a hostPath the node lacks ends the
// wait at once (ErrHostPathMissing), and the last warning is part of a
// timeout's error.
func (c *Client) waitPod(ctx context.Context, name string, oneShot bool, timeout time.Duration) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var why, warning string
	var warned time.Time
	for {
		gctx, gcancel := context.WithTimeout(wctx, c.timeout())
		p, err := c.Kube.CoreV1().Pods(c.NS()).Get(gctx, name, metav1.GetOptions{})
		gcancel()
		switch {
		case err != nil && wctx.Err() == nil:
			return nil, c.explain(err, "get pod "+name)
		case err == nil:
			switch {
			case oneShot && p.Status.Phase == corev1.PodSucceeded:
				return p, nil
			case p.Status.Phase == corev1.PodFailed:
				return p, fmt.Errorf("pod %s on %s failed: %s%s", name, p.Spec.NodeName, PodProblem(p), terminationMessages(p))
			case !oneShot && podReady(p):
				return p, nil
			case !oneShot && p.Status.Phase == corev1.PodSucceeded:
				return p, fmt.Errorf("pod %s exited although it should keep running%s", name, terminationMessages(p))
			}
			why = PodProblem(p)
			if strings.Contains(why, "CrashLoopBackOff") || strings.Contains(why, "ErrImageNeverPull") ||
				strings.Contains(why, "InvalidImageName") || strings.Contains(why, "CreateContainerConfigError") {
				return p, fmt.Errorf("pod %s cannot start: %s", name, why)
			}
			if p.Status.Phase == corev1.PodPending && time.Since(warned) >= 2*time.Second {
				warned = time.Now()
				if w := c.podWarning(wctx, name); w != "" {
					warning = w
				}
				if strings.Contains(warning, "hostPath type check failed") {
					return p, fmt.Errorf("pod %s on %s cannot start: %s: %w", name, p.Spec.NodeName, warning, ErrHostPathMissing)
				}
			}
		}
		select {
		case <-wctx.Done():
			if why == "" {
				why = "no status yet"
			}
			if warning != "" {
				why = strings.TrimSpace(why) + " (last warning: " + warning + ")"
			}
			return nil, fmt.Errorf("pod %s not ready after %v: %s", name, timeout, why)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func terminationMessages(p *corev1.Pod) string {
	var out []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
			out = append(out, fmt.Sprintf("%s: %s", cs.Name, strings.TrimSpace(t.Message)))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

// podWarning returns the newest Warning event of pod name as "Reason:
// message", or "" when there is none (or the events cannot be read: they
// only explain, the wait goes on without them).
func (c *Client) podWarning(ctx context.Context, name string) string {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	evs, err := c.Kube.CoreV1().Events(c.NS()).List(rctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",type=Warning"})
	if err != nil {
		return ""
	}
	var newest *corev1.Event
	for i := range evs.Items {
		e := &evs.Items[i]
		if e.InvolvedObject.Name != name || e.Type != corev1.EventTypeWarning { // fake clients ignore field selectors
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return ""
	}
	return newest.Reason + ": " + strings.TrimSpace(newest.Message)
}

// eventTime is when an event last happened, whichever of its times is set.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// DeletePod deletes a test pod and waits briefly until it is gone.
func (c *Client) DeletePod(ctx context.Context, name string) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	err := c.Kube.CoreV1().Pods(c.NS()).Delete(rctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.explain(err, "delete pod "+name)
	}
	return nil
}

// DeleteTestPods removes every test pod cnperf made.
func (c *Client) DeleteTestPods(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	err := c.Kube.CoreV1().Pods(c.NS()).DeleteCollection(rctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))},
		metav1.ListOptions{LabelSelector: TestPodLabel + "=true"})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.explain(err, "delete test pods")
	}
	return nil
}
