package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnperf/cnperf/internal/qos"
	"github.com/cnperf/cnperf/internal/suite"
)

// KernelTC is what a node's kernel offers of the traffic-control features
// the police action needs, as a pod on the node found by trying them.
type KernelTC struct {
	Node   string `json:"node,omitempty"`
	Kernel string `json:"kernel"`
	// Where the features were tried (scratch devices in the pod's own
	// network namespace: nothing of the node's is touched).
	Where string `json:"where,omitempty"`
	// Missing holds each feature the kernel refused, with the kernel's
	// error (qos.UnsupportedError's text).
	Missing map[string]string `json:"missing,omitempty"`
	// Err is set when the features could not be tried at all.
	Err string `json:"error,omitempty"`
}

// Lacks says why the kernel cannot police ("" when it can).
func (k KernelTC) Lacks() string {
	if k.Err != "" {
		return fmt.Sprintf("node %s: could not try the police action: %s", k.Node, k.Err)
	}
	var parts []string
	for _, f := range (qos.Police{}).Needs() {
		if why, ok := k.Missing[f]; ok {
			parts = append(parts, why)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("node %s (kernel %s): %s", k.Node, k.Kernel, strings.Join(parts, "; "))
}

// DetectedTC are the traffic-control features detect pods try: the
// police action's, and what CNIs' own QoS needs (fq for Cilium's
// Bandwidth Manager, tbf and mirred for bandwidth limits).
func DetectedTC() []string {
	return append(qos.Police{}.Needs(), qos.FeatureFq, qos.FeatureTBF, qos.FeatureMirred)
}

// DetectLocal tries the features of DetectedTC on scratch devices (in a
// fresh namespace, else in this one) and reports what the kernel
// refused; detect pods run it.
func DetectLocal(ctx context.Context) KernelTC {
	needs := DetectedTC()
	f, err := qos.Detect(ctx, "", needs...)
	k := KernelTC{Kernel: f.Kernel, Where: f.Where}
	if err != nil {
		k.Err = err.Error()
		return k
	}
	for _, n := range needs {
		if x, _ := f.Get(n); !x.Present {
			if k.Missing == nil {
				k.Missing = map[string]string{}
			}
			k.Missing[n] = (&qos.UnsupportedError{Feature: n, Reason: x.Err}).Error()
		}
	}
	return k
}

// DetectTC runs a one-shot pod on node, in its own network namespace with
// NET_ADMIN and nothing else, that tries the police action's features on
// scratch devices there (`cnperf k8s detect-tc`) and reports through its
// termination message. Kernel features are the node's, whatever the
// namespace; the node's own links are not touched.
func (c *Client) DetectTC(ctx context.Context, node string, timeout time.Duration) (KernelTC, error) {
	tmpl, err := c.AgentTemplate(ctx)
	if err != nil {
		return KernelTC{}, err
	}
	name := "cnperf-detect-" + shortID()
	p, err := c.RunPod(ctx, TestPod{
		Name: name, Node: node, OneShot: true,
		Labels: map[string]string{"app.kubernetes.io/name": "cnperf-inspector"},
		Container: corev1.Container{
			Name: "detect", Image: tmpl.Image, ImagePullPolicy: tmpl.ImagePullPolicy, Args: []string{"k8s", "detect-tc"},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}}},
		},
	}, timeout)
	if err != nil {
		return KernelTC{}, fmt.Errorf("detect the police action on %s: %w", node, err)
	}
	defer c.DeletePod(context.WithoutCancel(ctx), name) //nolint:errcheck // best effort; the namespace removal catches leftovers
	msg := ""
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			msg = cs.State.Terminated.Message
		}
	}
	var k KernelTC
	if err := json.Unmarshal([]byte(msg), &k); err != nil {
		return KernelTC{}, fmt.Errorf("detect pod %s on %s answered %q: %w", name, node, msg, err)
	}
	k.Node = node
	return k, nil
}

// Probe looks at what the environment can do only by trying it on the
// nodes, for the capabilities the suite may use (suite.CapUser): for
// suite.CapPolice or suite.CapPodAnnotate, a detect pod on every node with an agent tries the
// police action (in parallel). Caps then says, per the nodes' kernels,
// whether the police action is unsupported (with the kernel's reason).
// It fails only when the agents cannot be listed.
func (e *Env) Probe(ctx context.Context, caps ...suite.Cap) error {
	if !(slices.Contains(caps, suite.CapPolice) || slices.Contains(caps, suite.CapPodAnnotate)) || !e.Sets.QoS {
		// A detect pod needs NET_ADMIN, which only the qos-agents opt-in
		// allows; without it the police action stays refused.
		return nil
	}
	timeout := e.waitTimeout()
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return err
	}
	var nodes []string
	for _, a := range agents {
		if !slices.Contains(nodes, a.Node) {
			nodes = append(nodes, a.Node)
		}
	}
	out := make([]KernelTC, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := e.Client.DetectTC(ctx, n, timeout)
			if err != nil {
				// A node where the pod could not try is named, with why, in
				// the police action's "unsupported" reason.
				k = KernelTC{Node: n, Err: err.Error()}
			}
			out[i] = k
		}()
	}
	wg.Wait()
	e.mu.Lock()
	e.kernels = out
	e.mu.Unlock()
	return nil
}

// Kernels returns what Probe found on each node.
func (e *Env) Kernels() []KernelTC {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.kernels)
}

// withKernels adds what Probe found to caps: the features tried
// (Caps.KernelTC, each with the reasons of the nodes that lack it), and
// the police action unsupported, with the kernel's reason, when a node
// lacks it.
func (e *Env) withKernels(caps suite.Caps) suite.Caps {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.kernels) == 0 {
		return caps
	}
	caps.KernelTC, caps.CNI.Kernel = kernelTC(e.kernels)
	var lacks, has []string
	for _, k := range e.kernels {
		if why := k.Lacks(); why != "" {
			lacks = append(lacks, why)
		} else {
			has = append(has, k.Node)
		}
	}
	if len(lacks) > 0 {
		if caps.Unsupported == nil {
			caps.Unsupported = map[suite.Cap]string{}
		}
		caps.Unsupported[suite.CapPolice] = strings.Join(lacks, "; ")
		delete(caps.Why, suite.CapPolice)
		return caps
	}
	if caps.Why != nil && caps.Why[suite.CapPolice] != "" {
		caps.Why[suite.CapPolice] += fmt.Sprintf(" (the kernels of %s have it)", strings.Join(has, ", "))
	}
	return caps
}

// kernelTC says per feature of DetectedTC what the nodes' kernels lack
// ("" when every node has it; a feature no node could try is left out)
// and the nodes' kernel releases.
func kernelTC(ks []KernelTC) (map[string]string, string) {
	out := map[string]string{}
	var kernels []string
	for _, k := range ks {
		if k.Err != "" {
			continue
		}
		if !slices.Contains(kernels, k.Kernel) {
			kernels = append(kernels, k.Kernel)
		}
		for _, f := range DetectedTC() {
			why, missing := k.Missing[f]
			switch {
			case missing && out[f] != "":
				out[f] += "; "
				fallthrough
			case missing:
				out[f] += fmt.Sprintf("node %s (kernel %s): %s", k.Node, k.Kernel, why)
			default:
				if _, ok := out[f]; !ok {
					out[f] = ""
				}
			}
		}
	}
	if len(kernels) == 0 {
		return nil, ""
	}
	return out, strings.Join(kernels, ", ")
}
