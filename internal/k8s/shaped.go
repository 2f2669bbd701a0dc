package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ShapedAgent is an agent pod with bandwidth annotations.
type ShapedAgent struct {
	Pod         *corev1.Pod
	Node        string
	IP          string
	HostIfindex int    // index of the pod's host-side veth on its node
	Ingress     string // the annotations as given ("" when unset)
	Egress      string
}

// ShapedOptions describe a shaped agent.
type ShapedOptions struct {
	Node    string
	Ingress string // kubernetes.io/ingress-bandwidth, e.g. 10M
	Egress  string // kubernetes.io/egress-bandwidth
	// Calico asks with Calico's own annotations
	// (qos.projectcalico.org/ingressBandwidth, egressBandwidth) instead.
	Calico bool
	// Annotations are more annotations of the pod (a CNI's own QoS:
	// cni-qos); with them the bandwidths may be left empty.
	Annotations map[string]string
	Timeout     time.Duration
}

// StartShapedAgent starts an agent pod on o.Node with the bandwidth
// annotations, running the deployed agent's image and settings. An init
// container records the index of the pod's host-side veth, so the qdiscs
// the CNI put there can be read back with InspectNode. The caller deletes
// the pod (DeletePod) when done.
func (c *Client) StartShapedAgent(ctx context.Context, o ShapedOptions) (ShapedAgent, error) {
	if o.Ingress == "" && o.Egress == "" && len(o.Annotations) == 0 {
		return ShapedAgent{}, errors.New("shaped agent: give an ingress or an egress bandwidth, or annotations")
	}
	ps, err := c.agentPodSpec(ctx)
	if err != nil {
		return ShapedAgent{}, err
	}
	tmpl := ps.Containers[0]
	ann := maps.Clone(o.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ing, egr := IngressBandwidth, EgressBandwidth
	if o.Calico {
		ing, egr = CalicoIngressBandwidth, CalicoEgressBandwidth
	}
	if o.Ingress != "" {
		ann[ing] = o.Ingress
	}
	if o.Egress != "" {
		ann[egr] = o.Egress
	}
	ctr := tmpl
	ctr.Name = "agent"
	// No liveness probe: it crosses the pod's own ingress limit, where a
	// flood's backlog holds it for minutes, and kubelet would restart the
	// agent mid-test (seen: "connection refused" to its responder). The
	// environment deletes the pod when the phase ends anyway.
	ctr.LivenessProbe = nil
	init := corev1.Container{
		Name: "iflink", Image: tmpl.Image, ImagePullPolicy: tmpl.ImagePullPolicy,
		Args: []string{"k8s", "iflink", "eth0"},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}
	name := "cnperf-shaped-" + shortID()
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	p, err := c.RunPod(ctx, TestPod{
		Name: name, Node: o.Node, Annotations: ann, Container: ctr, Init: &init, Volumes: agentStateVolumes(ctr), Security: ps.SecurityContext,
		Labels: map[string]string{"app.kubernetes.io/name": "cnperf-agent", "app.kubernetes.io/component": "shaped"},
	}, o.Timeout)
	if err != nil {
		return ShapedAgent{}, fmt.Errorf("shaped agent on %s: %w", o.Node, err)
	}
	sa := ShapedAgent{Pod: p, Node: p.Spec.NodeName, IP: p.Status.PodIP, Ingress: o.Ingress, Egress: o.Egress}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == "iflink" && cs.State.Terminated != nil {
			sa.HostIfindex, err = strconv.Atoi(strings.TrimSpace(cs.State.Terminated.Message))
			if err != nil {
				_ = c.DeletePod(context.WithoutCancel(ctx), name)
				return ShapedAgent{}, fmt.Errorf("shaped agent %s: init container reported %q, not a link index", name, cs.State.Terminated.Message)
			}
		}
	}
	if sa.HostIfindex == 0 {
		_ = c.DeletePod(context.WithoutCancel(ctx), name)
		return ShapedAgent{}, fmt.Errorf("shaped agent %s: no link index from its init container", name)
	}
	return sa, nil
}

// ShapingQdiscs reads back what the CNI installed for a shaped agent: the
// qdiscs on its host-side veth and on the device its ingress filter
// redirects to.
func (c *Client) ShapingQdiscs(ctx context.Context, sa ShapedAgent, cniConfDir string, timeout time.Duration) ([]LinkTC, error) {
	r, err := c.InspectNode(ctx, sa.Node, sa.HostIfindex, cniConfDir, timeout)
	if err != nil {
		return nil, err
	}
	return r.Links, nil
}

func shortID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// agentStateVolumes gives the volumes an agent's container template
// mounts their volumes in a pod made from it: the --state-dir mount
// ("state", an emptyDir in the DaemonSets), the agent's identity
// ("agent-token", its projected ServiceAccount token, audience cnperf) and,
// under TLS, the CA it verifies the server with ("ca", the CABundle).
func agentStateVolumes(ctr corev1.Container) []corev1.Volume {
	var vols []corev1.Volume
	for _, m := range ctr.VolumeMounts {
		switch m.Name {
		case "state":
			vols = append(vols, corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		case AgentTokenVolume:
			vols = append(vols, agentTokenVolume())
		case caVolume: // under TLS: the CA bundle --ca-file reads
			vols = append(vols, caBundleVolume())
		}
	}
	return vols
}

// AgentTokenVolume is the name of the agents' token volume.
const AgentTokenVolume = "agent-token"

// agentTokenVolume is the projected ServiceAccount token agents present
// to the server, as the DaemonSets mount it.
func agentTokenVolume() corev1.Volume {
	return corev1.Volume{Name: AgentTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: "cnperf", ExpirationSeconds: ptrTo(int64(600)), Path: "token"}}},
	}}}
}

// AgentVolumes returns the volumes a pod made from the agent's container
// template needs for its mounts (its state directory and its token).
func AgentVolumes(ctr corev1.Container) []corev1.Volume { return agentStateVolumes(ctr) }
