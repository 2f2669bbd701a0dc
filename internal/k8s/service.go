package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Labels of the Services cnperf makes for a run.
const (
	// ServiceSelectorLabel is put on the destination agent pod for the
	// run; the run's Service selects the pod by it (the value is the
	// Service's name). A DaemonSet's pods share every other label.
	ServiceSelectorLabel = "cnperf.io/service"
	// RunServiceLabel marks the Services made for a run ("true"):
	// `kubectl -n cnperf delete svc -l cnperf.io/run-service=true` removes
	// what a killed run left (undeploy removes them with the namespace).
	RunServiceLabel = "cnperf.io/run-service"
)

// RunService is a ClusterIP Service made for a run in front of one agent
// pod: Port, TCP and UDP, to the same port of the pod (its responder).
type RunService struct {
	Name      string `json:"name"`
	Pod       string `json:"pod"`
	PodIP     string `json:"pod_ip"`
	ClusterIP string `json:"cluster_ip"`
	Port      int    `json:"port"`
}

// Addr is the Service's CLUSTER_IP:PORT.
func (s RunService) Addr() string { return net.JoinHostPort(s.ClusterIP, strconv.Itoa(s.Port)) }

// CreateRunService labels the agent pod pod with ServiceSelectorLabel and
// makes a ClusterIP Service selecting it by that label, forwarding port
// (TCP and UDP) to the same port, then waits until the Service's
// EndpointSlice lists the pod as ready (kube-proxy programs its rules
// from there). On failure what was made is removed.
func (c *Client) CreateRunService(ctx context.Context, pod string, port int, timeout time.Duration) (RunService, error) {
	if port < 1 || port > 65535 {
		return RunService{}, fmt.Errorf("service port %d: want 1-65535", port)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	svc := RunService{Name: "cnperf-svc-" + hex.EncodeToString(b), Pod: pod, Port: port}
	if err := c.labelPod(ctx, pod, svc.Name); err != nil {
		return svc, err
	}
	fail := func(err error) (RunService, error) {
		return svc, errors.Join(err, c.DeleteRunService(context.WithoutCancel(ctx), svc))
	}
	p32 := int32(port)
	obj := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: c.NS(), Labels: map[string]string{
			RunServiceLabel: "true", "app.kubernetes.io/part-of": "cnperf", "app.kubernetes.io/managed-by": "cnperf"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{ServiceSelectorLabel: svc.Name},
			Ports: []corev1.ServicePort{
				{Name: "responder-tcp", Protocol: corev1.ProtocolTCP, Port: p32, TargetPort: intstr.FromInt32(p32)},
				{Name: "responder-udp", Protocol: corev1.ProtocolUDP, Port: p32, TargetPort: intstr.FromInt32(p32)},
			},
		},
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	made, err := c.Kube.CoreV1().Services(c.NS()).Create(rctx, obj, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return fail(c.explain(err, "create service "+svc.Name))
	}
	svc.ClusterIP = made.Spec.ClusterIP
	if net.ParseIP(svc.ClusterIP) == nil {
		return fail(fmt.Errorf("service %s got no ClusterIP (%q)", svc.Name, svc.ClusterIP))
	}
	ip, err := c.waitEndpoint(ctx, svc.Name, timeout)
	if err != nil {
		return fail(err)
	}
	svc.PodIP = ip
	return svc, nil
}

// DeleteRunService deletes the Service and takes the label off its pod
// (a pod or Service already gone is no error).
func (c *Client) DeleteRunService(ctx context.Context, svc RunService) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	var errs []error
	err := c.Kube.CoreV1().Services(c.NS()).Delete(rctx, svc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, c.explain(err, "delete service "+svc.Name))
	}
	if err := c.labelPod(rctx, svc.Pod, ""); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// labelPod sets ServiceSelectorLabel on the pod to value ("" removes it).
func (c *Client) labelPod(ctx context.Context, pod, value string) error {
	return c.labelPodWith(ctx, pod, ServiceSelectorLabel, value)
}

// waitEndpoint waits until the Service's EndpointSlice has one ready
// endpoint and returns its address.
func (c *Client) waitEndpoint(ctx context.Context, name string, timeout time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		rctx, rcancel := context.WithTimeout(wctx, c.timeout())
		sl, err := c.Kube.DiscoveryV1().EndpointSlices(c.NS()).List(rctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		rcancel()
		if err != nil {
			last = c.explain(err, "list endpointslices of service "+name).Error()
		} else {
			last = fmt.Sprintf("%d endpointslices, no ready endpoint", len(sl.Items))
			for _, s := range sl.Items {
				for _, ep := range s.Endpoints {
					if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 {
						return ep.Addresses[0], nil
					}
				}
			}
		}
		select {
		case <-wctx.Done():
			return "", fmt.Errorf("service %s has no ready endpoint after %v (%s)", name, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// services is what the environment keeps of the Services it made: the
// address each pod's Service has, by pod name.
type services struct {
	mu  sync.Mutex
	via map[string]string
}

func (s *services) set(pod, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.via == nil {
		s.via = map[string]string{}
	}
	if addr == "" {
		delete(s.via, pod)
		return
	}
	s.via[pod] = addr
}

// rewrite points a step marked Service to its destination's Service.
func (s *services) rewrite(st suite.Step) suite.Step {
	if !st.Service {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.via[st.Dst.Name]; ok {
		st.Via = v
	}
	return st
}

// applyService makes a Service in front of the agent pod c.Member for the
// phase (see CreateRunService), checks that traffic to it arrives from
// another node (kube-proxy programs each node on its own schedule after
// the endpoint is ready), and returns its removal.
func (e *Env) applyService(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	timeout := e.waitTimeout()
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	member := agentNamed(agents, c.Member)
	if member == nil || member.HostNetwork {
		return nil, fmt.Errorf("no agent pod %s to put a Service in front of", c.Member)
	}
	svc, err := e.Client.CreateRunService(ctx, member.Name, c.Port, timeout)
	if err != nil {
		return nil, err
	}
	undo := func(ctx context.Context) error {
		e.svc.set(member.Name, "")
		return e.Client.DeleteRunService(ctx, svc)
	}
	if peer := servicePeer(agents, member.Node); peer != nil {
		if err := e.serviceReady(ctx, *peer, *member, svc, timeout); err != nil {
			return nil, errors.Join(err, undo(context.WithoutCancel(ctx)))
		}
	}
	e.svc.set(member.Name, svc.Addr())
	return undo, nil
}

// servicePeer is the first ready agent pod on another node than node.
func servicePeer(agents []Agent, node string) *Agent {
	for i, a := range agents {
		if !a.HostNetwork && a.Ready && a.Component != "shaped" && a.Node != node {
			return &agents[i]
		}
	}
	return nil
}

// serviceReady runs short UDP request/response tasks from peer through
// the Service until one succeeds: the peer's node then forwards the
// ClusterIP. Each try is a new flow (a new source port), so a datagram
// sent before kube-proxy's rules were there, which conntrack remembers
// un-NATed, does not spoil the next.
func (e *Env) serviceReady(ctx context.Context, peer, member Agent, svc RunService, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	excl := false
	spec := probe.Spec{Kind: probe.KindRR, Proto: "udp", Count: 5, Timeout: probe.Duration(2 * time.Second)}
	var last string
	for try := 1; ; try++ {
		run, err := e.Server.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: peer.UID, Dst: member.UID,
			Type: api.TypeProbe, Spec: &spec, Exclusive: &excl, Via: svc.Addr()}}})
		if err != nil {
			return fmt.Errorf("service %s: check it from %s: %w", svc.Name, peer.Name, err)
		}
		run, err = e.waitRun(ctx, run, 30*time.Second, "service check")
		switch {
		case err != nil:
			last = err.Error()
		case len(run.Tasks) == 1 && run.Tasks[0].State == api.StateSucceeded:
			return nil
		case len(run.Tasks) == 1:
			last = run.Tasks[0].State + ": " + run.Tasks[0].Reason
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("service %s (%s) did not carry UDP from %s on node %s to %s within %v, %d tries (last: %s)",
				svc.Name, svc.Addr(), peer.Name, peer.Node, member.Name, timeout, try, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// waitRun polls a run until it is final, cancelling it after bound
// (what names the check, for the cancellation's reason).
func (e *Env) waitRun(ctx context.Context, run api.Run, bound time.Duration, what string) (api.Run, error) {
	deadline := time.Now().Add(bound)
	for run.State == "" || run.State == api.RunRunning {
		if time.Now().After(deadline) || ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = e.Server.CancelRun(cctx, run.ID, what+" took too long")
			cancel()
			return run, fmt.Errorf("run %s did not finish within %v", run.ID, bound)
		}
		select {
		case <-ctx.Done():
			continue
		case <-time.After(250 * time.Millisecond):
		}
		got, err := e.Server.GetRun(ctx, run.ID)
		if err != nil {
			return run, fmt.Errorf("poll run %s: %w", run.ID, err)
		}
		run = got
	}
	return run, nil
}
