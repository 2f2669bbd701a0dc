package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/qosspec"
)

// A Cap is something an environment can change for a suite. Every Change
// uses exactly one.
type Cap string

// The capabilities suites ask for.
const (
	// CapNodeQdisc puts a qdisc on a node's uplink (egress towards the
	// other nodes: where a NIC's queue is); Change.Member is the node.
	CapNodeQdisc Cap = "node-qdisc"
	// CapPodQdisc puts a qdisc on a pod's own interface (its egress);
	// Change.Member is the pod.
	CapPodQdisc Cap = "pod-qdisc"
	// CapPodShaping limits a pod's bandwidth as the CNI bandwidth plugin
	// does for the kubernetes.io/ingress-bandwidth and egress-bandwidth
	// annotations (Change.QoS is a qosspec.SpecBandwidth); Change.Member
	// is the pod.
	CapPodShaping Cap = "pod-shaping"
	// CapPodBurst lets a suite choose the burst of a pod's bandwidth limit
	// (on Kubernetes the CNI plugin chooses it). It is asked for through
	// Caps, not through a Change.
	CapPodBurst Cap = "pod-burst"
	// CapPolice polices what a pod sends on arrival at its host-side veth
	// with the kernel's police action (Change.QoS is a qosspec.SpecPolice).
	CapPolice Cap = "police"
	// CapVXLANTOS makes a node's VXLAN tunnel ends copy the inner TOS to
	// the outer header (tos inherit); Change.Member is the node.
	CapVXLANTOS Cap = "vxlan-tos"
	// CapService creates a ClusterIP-style Service in front of a pod
	// (Change.Member), forwarding Change.Port (TCP and UDP) to the same
	// port of the pod; the environment fills the Via of the phase's steps
	// marked Service with the Service's IP:PORT (see Rewriter).
	CapService Cap = "service"
	// CapPodAnnotations asks for a pod's bandwidth limit with pod
	// annotations, from a token bucket the CNI fills (which a suite may
	// drain first). It is asked for through Caps, not through a Change.
	CapPodAnnotations Cap = "pod-annotations"
	// CapNetworkPolicy makes NetworkPolicies (Change.Policy) that select
	// the pod Change.Member for ingress, enforced as the CNI enforces
	// them; the environment removes them all in the undo.
	CapNetworkPolicy Cap = "network-policy"
	// CapPodAnnotate starts a pod standing in for Change.Member with the
	// pod annotations Change.PodAnnotations, as a CNI reads them when the
	// pod starts (a CNI's own QoS: cni-qos); the undo deletes it.
	CapPodAnnotate Cap = "pod-annotate"
)

// capText says what each capability does, for refusals.
var capText = map[Cap]string{
	CapNodeQdisc:      "put a qdisc on a node's uplink",
	CapPodQdisc:       "put a qdisc on a pod's own interface",
	CapPodShaping:     "limit a pod's bandwidth as the CNI bandwidth plugin does",
	CapPodBurst:       "choose the burst of a pod's bandwidth limit",
	CapPolice:         "police a pod's traffic with the kernel's police action",
	CapVXLANTOS:       "make the VXLAN tunnel ends copy the inner TOS",
	CapService:        "create a Service in front of a pod",
	CapPodAnnotations: "ask for a pod's bandwidth limit with pod annotations a CNI honours",
	CapNetworkPolicy:  "make NetworkPolicies that the network enforces",
	CapPodAnnotate:    "start a pod with the annotations a CNI's own QoS reads",
}

// Describe says in a few words what the capability does.
func (c Cap) Describe() string {
	if t, ok := capText[c]; ok {
		return t
	}
	return string(c)
}

// Encapsulations of the path between nodes (Caps.Encap).
const (
	EncapNone  = ""
	EncapVXLAN = "vxlan"
)

// Caps says what an environment can change and what its path is like:
// the capabilities it has, and for those it lacks, why. A suite decides
// from these facts alone, never from which environment it is in.
type Caps struct {
	// PathMTU is the MTU of the pods' interfaces (0: not known; suites
	// take 1500).
	PathMTU int
	// Encap is how traffic between nodes is encapsulated (EncapNone,
	// EncapVXLAN): variants that look at the outer header need it.
	Encap string
	// AsIs says the network is not the run's own (a cluster's CNI): a
	// suite measures it as it is by default and changes nodes only when
	// asked by name (qos-priority: as-is and pod-htb rather than the
	// bottleneck variants; both placements).
	AsIs bool
	Have []Cap
	// Why holds, for capabilities the environment does not offer, the
	// reason.
	Why map[Cap]string
	// Unsupported holds capabilities the environment offers but its kernel
	// lacks (the police action), with the kernel's reason: a finding a
	// suite may report as its result rather than a refusal.
	Unsupported map[Cap]string
	// CNI is the network's own CNI where the environment knows it (a
	// cluster's facts): a suite that tries a CNI's own features (cni-qos)
	// picks them by its name and release.
	CNI CNIInfo
	// MetadataTunnels names the nodes' VXLAN devices in metadata mode
	// (collect_md, as read off a node): their outer TOS is what the CNI's
	// datapath writes per packet, and no setting of the device (tos
	// inherit, CapVXLANTOS) carries a mark across them.
	MetadataTunnels []string
	// KernelTC holds the traffic-control features the nodes' kernels
	// were tried for (detected, not assumed): "" when every node has it,
	// else the kernel's reason. Nil when nothing was tried.
	KernelTC map[string]string
}

// CNIInfo names a cluster's CNI: its name as the cluster's facts say it
// ("calico", "cilium", "flannel"), its release ("v3.31.0", "" when not
// known) and the nodes' kernel release.
type CNIInfo struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	Kernel  string `json:"kernel,omitempty"`
}

// Has reports whether the environment has c.
func (cs Caps) Has(c Cap) bool { return slices.Contains(cs.Have, c) }

// Reason says why the environment lacks c.
func (cs Caps) Reason(c Cap) string {
	if r := cs.Why[c]; r != "" {
		return r
	}
	if r := cs.Unsupported[c]; r != "" {
		return r
	}
	return "no environment under this run can change the network (run the suite on a lab: cnperf lab run, or cnperf run --lab)"
}

// ErrEnvLacks says the environment under a run cannot make a change a
// suite needs; the error wrapping it (*LacksError) names what is missing.
var ErrEnvLacks = errors.New("the environment cannot make the changes this suite needs")

// LacksError names the capabilities a suite needs and its environment
// lacks, with the reasons.
type LacksError struct {
	Suite   string
	Missing []Cap
	Why     []string
}

func (e *LacksError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, c := range e.Missing {
		parts[i] = fmt.Sprintf("%s (%s): %s", c, c.Describe(), e.Why[i])
	}
	return fmt.Sprintf("suite %s needs what this environment cannot do: %s", e.Suite, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrEnvLacks) true.
func (e *LacksError) Is(target error) bool { return target == ErrEnvLacks }

// Lacks returns a *LacksError naming the capabilities of need that cs
// lacks, or nil.
func (cs Caps) Lacks(suite string, need ...Cap) error {
	e := &LacksError{Suite: suite}
	for _, c := range need {
		if !cs.Has(c) && !slices.Contains(e.Missing, c) {
			e.Missing = append(e.Missing, c)
			e.Why = append(e.Why, cs.Reason(c))
		}
	}
	if len(e.Missing) == 0 {
		return nil
	}
	return e
}

// Annotations a bandwidth limit on Kubernetes is asked for with
// (Change.Annotations).
const (
	AnnotationsKubernetes = "kubernetes"
	AnnotationsCalico     = "calico"
)

// A Change is what a phase needs changed around it, as data: the
// environment decides how (netlink in the lab, annotated pods or agent
// task QoS on Kubernetes).
type Change struct {
	// What is the capability the change uses.
	What Cap `json:"what"`
	// Member is the node or pod the change applies to, named as the
	// agents' Endpoint.Node or Endpoint.Name (see each Cap).
	Member string `json:"member"`
	// QoS is the set-up, for qdisc, shaping and police changes.
	QoS *qosspec.Spec `json:"qos,omitempty"`
	// AsMade asks the environment to leave a bandwidth limit as it makes
	// it: on Kubernetes the CNI's token bucket is then not drained first,
	// so the flows meet the burst a fresh pod gets (policing's cni-ingress
	// variant, as the thesis met it).
	AsMade bool `json:"as_made,omitempty"`
	// Annotations, for a bandwidth limit on Kubernetes, names the pod
	// annotations that ask for it: "" or AnnotationsKubernetes
	// (kubernetes.io/*-bandwidth, which the CNI bandwidth plugin, or
	// Calico's Felix, honours), AnnotationsCalico
	// (qos.projectcalico.org/*Bandwidth, Calico's own).
	Annotations string `json:"annotations,omitempty"`
	// Port is, for a Service, the port it forwards (TCP and UDP).
	Port int `json:"port,omitempty"`
	// PodAnnotations are, for CapPodAnnotate, the annotations of the pod
	// standing in for Member.
	PodAnnotations map[string]string `json:"pod_annotations,omitempty"`
	// Policy is, for CapNetworkPolicy, the policies to make.
	Policy *PolicySet `json:"policy,omitempty"`
	// After, when set, makes the change this long after the phase's run
	// is created, while its steps run (a policy created mid-test), rather
	// than before; it is undone with the others, first.
	After time.Duration `json:"after,omitempty"`
	// For is how long the phase needs the change: its longest step. The
	// Runner fills it when the suite leaves it 0. An environment that has
	// an agent hold the change (Kubernetes) bounds the hold's lifetime by
	// it (plus a slack), so a run that dies cannot leave the change behind
	// for longer.
	For time.Duration `json:"for,omitempty"`
}

func (c Change) String() string {
	s := fmt.Sprintf("%s on %s", c.What, c.Member)
	if c.Port != 0 {
		s += fmt.Sprintf(" port %d", c.Port)
	}
	if c.QoS != nil {
		s += ": " + c.QoS.String()
	}
	return s
}

// Env is the environment a suite runs in (the lab, a Kubernetes cluster):
// it says what it can change and makes the changes.
type Env interface {
	// Caps says what this environment can change.
	Caps() Caps
	// Apply makes the change and returns how to undo it. The undo gets a
	// context that is not yet cancelled; it must tolerate being called
	// once only, after Apply succeeded. The undo of the last policy set
	// (CapNetworkPolicy) on a pod whose PolicySet names From returns once
	// a new connection from From to the pod is allowed again, or an error
	// naming the pair and the set when it is not within a bound.
	Apply(ctx context.Context, c Change) (undo func(context.Context) error, err error)
}

// A Finisher is an environment that keeps something for the whole suite
// run (a cluster's policy labels on the pair's pods: a label change costs
// a CNI a new security identity) and removes it once the last phase is
// done; the Runner calls Finish at the end of Run, also on failure.
type Finisher interface {
	Finish(ctx context.Context) error
}

// A NodeLabeler is an environment that knows its nodes' labels (a
// cluster's Node objects, a lab's zones): the Runner gives them to the
// suite on the endpoints (Endpoint.NodeLabels), for plans by zone.
type NodeLabeler interface {
	NodeLabels(ctx context.Context) (map[string]map[string]string, error)
}

// A Checker is an environment that can check a change before anything is
// made (the link exists, a bottleneck fits below the link's rate, the
// kernel takes the set-up). The Runner checks every change of every
// planned phase before it creates the first run.
type Checker interface {
	Check(ctx context.Context, c Change) error
}

// A CapUser is a suite that says which capabilities it may ask for, so an
// environment that knows some of them only by trying (the police action
// on a cluster's nodes) looks before the suite is planned.
type CapUser interface {
	MayUse() []Cap
}

// A Rewriter is an environment that makes some changes its own way and
// says so in the phase's steps once the phase's changes are made:
// Kubernetes limits a pod's bandwidth on a fresh pod started with the
// annotations, which stands in for the pod named (the steps' Src or Dst
// becomes it), and the CNI chooses the burst (the steps' Applied says so).
type Rewriter interface {
	Rewrite(st Step) Step
}

// Applied says how the environment made a phase's changes where it
// differs from what the suite asked: who chose (By: "CNI") and the set-up
// as made.
type Applied struct {
	By  string        `json:"by"`
	QoS *qosspec.Spec `json:"qos,omitempty"`
}

// needs lists the capabilities the phases' changes use.
func needs(phases []Phase) []Cap {
	var out []Cap
	for _, ph := range phases {
		for _, c := range ph.Changes {
			if !slices.Contains(out, c.What) {
				out = append(out, c.What)
			}
		}
	}
	return out
}

// PolicySet is a set of ingress NetworkPolicies as data
// (CapNetworkPolicy): Count policies in all. Selecting of them select the
// destination pod (Change.Member) and each allows TCP from the pod From
// to Port; the others select and allow only addresses of no pod of the
// run (they cost the datapath a lookup, not a verdict). Deny, with
// Selecting 0, makes one more policy that selects the destination and
// allows nothing: every new connection to it is refused. From and Port,
// also given with Selecting 0, name the pair the environment prepares
// once for the run and checks after the set's removal (Env.Apply).
type PolicySet struct {
	Count     int    `json:"count"`
	Selecting int    `json:"selecting"`
	From      string `json:"from,omitempty"`
	Port      int    `json:"port,omitempty"`
	Deny      bool   `json:"deny,omitempty"`
}

// MaxPolicies bounds PolicySet.Count.
const MaxPolicies = 10000

// Check says what is wrong with the set, or nil.
func (p PolicySet) Check() error {
	switch {
	case p.Count < 0 || p.Count > MaxPolicies:
		return fmt.Errorf("policies %d: want 0-%d", p.Count, MaxPolicies)
	case p.Selecting < 0 || p.Selecting > p.Count:
		return fmt.Errorf("selecting %d: want 0-%d (the policies in all)", p.Selecting, p.Count)
	case p.Selecting > 0 && (p.From == "" || p.Port < 1 || p.Port > 65535):
		return fmt.Errorf("policies selecting the pod need the source pod and a port 1-65535 (from %q, port %d)", p.From, p.Port)
	case p.From != "" && (p.Port < 1 || p.Port > 65535):
		return fmt.Errorf("policies naming the source pod %s need its port 1-65535 (port %d)", p.From, p.Port)
	case p.Deny && p.Selecting > 0:
		return errors.New("a deny-all policy beside policies that allow the source would allow it: deny takes selecting 0")
	}
	return nil
}
