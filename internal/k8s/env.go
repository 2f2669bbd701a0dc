package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// ServerAPI is the part of the cnperf server's API a suite run on the
// cluster uses (the runner's); *client.Client implements it.
type ServerAPI = suite.API

// Env is a Kubernetes cluster as the environment of a suite. It limits a
// pod's bandwidth the way the cluster does, with the CNI bandwidth
// plugin: a fresh agent pod with the kubernetes.io/*-bandwidth
// annotations on the node of the pod named, which stands in for it in the
// phase's steps, its token bucket drained first by one unthrottled flow
// (containerd hands the plugin a burst of 2^32-1 bits, so a fresh bucket
// lets hundreds of megabytes through at line rate). A qdisc on a pod's
// interface, or with AllowNodeQdisc on a node's, is held for the phase by
// the agent that owns the interface (hold.go). What it cannot do yet its
// Caps say, so the runner refuses such suites before anything is made.
type Env struct {
	Client *Client
	// Server is the cnperf server's API; a shaped pod's agent registers
	// there.
	Server ServerAPI
	// CNIConfDir is the nodes' CNI configuration directory (to read back
	// the qdiscs the CNI installed).
	CNIConfDir string
	// Timeout bounds starting a shaped pod and its registration (default
	// 2 min); DrainTime is the draining flow's length (default 3 s).
	Timeout   time.Duration
	DrainTime time.Duration
	// AllowNodeQdisc lets the environment put a qdisc on a node's
	// interface (suite.CapNodeQdisc; --set allow-node-qdisc=true); without
	// it such a suite is refused before anything is made.
	AllowNodeQdisc bool
	// Sets are the opt-in agent sets deployed (Client.AgentSets); what
	// needs one that is missing is refused before anything is made, with
	// the option named.
	Sets AgentSets
	// HoldSlack is what a held qdisc may outlive its phase's longest step
	// (DefaultHoldSlack when 0); see hold.go.
	HoldSlack time.Duration
	// HoldStopWait bounds the wait of a hold's undo for its agent's
	// acknowledgement (DefaultHoldStopWait when 0); see hold.go.
	HoldStopWait time.Duration
	// PathMTU and Encap describe the pods' path for suite.Caps (Open
	// fills them from the cluster's facts).
	PathMTU int
	Encap   string
	// MetadataTunnels are the nodes' VXLAN devices in metadata mode (Open
	// fills them from the facts): tos inherit does nothing there, so
	// suite.CapVXLANTOS is refused with the reason.
	MetadataTunnels []string
	// CNI is the cluster's CNI as the session's facts found it (Open
	// fills it); the stored environment names it.
	CNI CNI

	svc services    // the Services made for the current phase (service.go)
	pol policyPairs // the pods labelled for policies (netpol.go)

	mu       sync.Mutex                // guards the fields below
	standIns map[string]suite.Endpoint // shaped pod, by the uid of the pod it stands in for
	// standInIPs maps a stood-in pod's address to its stand-in's.
	standInIPs map[string]string
	applied    *suite.Applied
	shaped     []Shaped
	holds      []Hold
	kernels    []KernelTC // what Probe found on each node
}

// Shaped is a shaped agent pod the environment started: the annotations,
// the qdiscs the CNI installed for it, and the flow that drained its
// token bucket.
type Shaped struct {
	Pod         string    `json:"pod"`
	Node        string    `json:"node"`
	Annotations Bandwidth `json:"annotations"`
	// Set are the annotations of a pod started for a CNI's own QoS
	// (suite.CapPodAnnotate).
	Set   map[string]string `json:"set,omitempty"`
	Links []LinkTC          `json:"links"`
	Drain *DrainResult      `json:"-"`
}

// Bandwidth are a pod's bandwidth annotations.
type Bandwidth struct {
	Ingress       string `json:"kubernetes.io/ingress-bandwidth,omitempty"`
	Egress        string `json:"kubernetes.io/egress-bandwidth,omitempty"`
	CalicoIngress string `json:"qos.projectcalico.org/ingressBandwidth,omitempty"`
	CalicoEgress  string `json:"qos.projectcalico.org/egressBandwidth,omitempty"`
}

// DrainResult is the unthrottled flow that emptied a shaped pod's token
// bucket: its receiver rate shows what the burst let through.
type DrainResult struct {
	Connection    string                `json:"connection"`
	Src           string                `json:"src"`
	Dst           string                `json:"dst"`
	ThroughputBps *probe.SenderReceiver `json:"throughput_bps,omitempty"`
	Err           string                `json:"error,omitempty"`
}

// Caps implements suite.Env.
func (e *Env) Caps() suite.Caps {
	caps := suite.Caps{AsIs: true, PathMTU: e.PathMTU, Encap: e.Encap, Have: []suite.Cap{suite.CapService, suite.CapPodAnnotations}, Why: map[suite.Cap]string{
		suite.CapPodBurst: "on Kubernetes the CNI bandwidth plugin chooses the burst; it is read back, not set",
		suite.CapPolice:   "cnperf does not put the police action on a cluster node's veth yet",
	}}
	have := func(c suite.Cap, ok bool, why string) {
		if ok {
			caps.Have = append(caps.Have, c)
		} else {
			caps.Why[c] = why
		}
	}
	enforces, why := e.CNI.EnforcesNetworkPolicy()
	have(suite.CapNetworkPolicy, enforces, why)
	have(suite.CapPodShaping, e.Sets.Host, hostAgentsWhy)
	have(suite.CapPodAnnotate, e.Sets.Host, hostAgentsWhy)
	caps.CNI = suite.CNIInfo{Name: e.CNI.Name, Version: e.CNI.Version}
	have(suite.CapPodQdisc, e.Sets.QoS, qosAgentsWhy)
	switch {
	case !e.Sets.Host || !e.Sets.QoS:
		caps.Why[suite.CapNodeQdisc] = hostQoSAgentsWhy
		caps.Why[suite.CapVXLANTOS] = hostVXLANAgentsWhy
	default:
		have(suite.CapNodeQdisc, e.AllowNodeQdisc, nodeQdiscWhy)
		have(suite.CapVXLANTOS, e.AllowNodeQdisc, nodeVXLANWhy)
	}
	if len(e.MetadataTunnels) > 0 {
		// Opting in changes nothing: the device ignores tos inherit.
		caps.MetadataTunnels = slices.Clone(e.MetadataTunnels)
		caps.Have = slices.DeleteFunc(caps.Have, func(c suite.Cap) bool { return c == suite.CapVXLANTOS })
		caps.Why[suite.CapVXLANTOS] = qosspec.MetadataTunnelWhy(e.MetadataTunnels...)
	}
	return e.withKernels(caps)
}

// Shaped returns the shaped pods the environment started, in order.
func (e *Env) Shaped() []Shaped {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Shaped(nil), e.shaped...)
}

// Apply implements suite.Env: a qdisc on a pod's or a node's interface
// held by the agent that owns it for the phase (hold.go); a bandwidth
// limit (suite.CapPodShaping) on a fresh annotated agent pod on the named
// pod's node, which the undo deletes.
func (e *Env) Apply(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if c.What == suite.CapPodQdisc || c.What == suite.CapNodeQdisc {
		return e.hold(ctx, c)
	}
	if c.What == suite.CapVXLANTOS {
		c.QoS = &qosspec.Spec{Setup: qosspec.SpecVXLANInherit}
		return e.hold(ctx, c)
	}
	if c.What == suite.CapService {
		return e.applyService(ctx, c)
	}
	if c.What == suite.CapNetworkPolicy {
		return e.applyPolicies(ctx, c)
	}
	if c.What == suite.CapPodAnnotate {
		return e.applyAnnotated(ctx, c)
	}
	if c.What != suite.CapPodShaping || c.QoS == nil || c.QoS.Setup != qosspec.SpecBandwidth {
		return nil, fmt.Errorf("on Kubernetes cnperf cannot make the change %s", c)
	}
	timeout := e.waitTimeout()
	agents, member, err := e.member(ctx, c.Member, "shape")
	if err != nil {
		return nil, err
	}
	calico := c.Annotations == suite.AnnotationsCalico
	bw := Bandwidth{Ingress: quantity(c.QoS.IngressRateBps), Egress: quantity(c.QoS.EgressRateBps)}
	si, err := e.startStandIn(ctx, member.UID, ShapedOptions{Node: member.Node, Ingress: bw.Ingress, Egress: bw.Egress, Calico: calico, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	if calico {
		bw = Bandwidth{CalicoIngress: bw.Ingress, CalicoEgress: bw.Egress}
	}
	sa, ep, links := si.agent, si.ep, si.links
	sh := Shaped{Pod: sa.Pod.Name, Node: sa.Node, Annotations: bw, Links: links}
	if peer := drainPeer(agents, member.Node); peer != nil && !c.AsMade {
		sh.Drain = e.drain(ctx, ep, *peer, c.QoS.EgressRateBps == 0)
	}
	applied := *c.QoS
	if b := tbfBurst(links); b != 0 {
		if applied.EgressRateBps != 0 {
			applied.EgressBurstBytes = b
		}
		if applied.IngressRateBps != 0 {
			applied.IngressBurstBytes = b
		}
	}
	e.mu.Lock()
	if e.standIns == nil {
		e.standIns = map[string]suite.Endpoint{}
	}
	e.standIns[member.UID] = ep
	e.standIn(member.IP, ep.IP)
	e.applied = &suite.Applied{By: shaperOf(links), QoS: &applied}
	e.shaped = append(e.shaped, sh)
	e.mu.Unlock()
	return si.undo, nil
}

// member returns the agent pods and the one named name, which a change
// is about to act on (what: "shape", "stand in for").
func (e *Env) member(ctx context.Context, name, what string) ([]Agent, *Agent, error) {
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return nil, nil, err
	}
	m := agentNamed(agents, name)
	if m == nil {
		return nil, nil, fmt.Errorf("no agent pod %s to %s", name, what)
	}
	return agents, m, nil
}

// standIn is an agent pod started in place of a suite's member, with its
// endpoint and what the CNI put on its interfaces.
type standIn struct {
	agent ShapedAgent
	ep    suite.Endpoint
	links []LinkTC
	undo  func(context.Context) error // deletes the pod and forgets the stand-in
}

// startStandIn starts an agent pod per o in place of the member with
// uid, then waits at once for its registration and for the read-back of
// the CNI's qdiscs on its interfaces (an inspector pod). On an error the
// pod is deleted again.
func (e *Env) startStandIn(ctx context.Context, uid string, o ShapedOptions) (standIn, error) {
	sa, err := e.Client.StartShapedAgent(ctx, o)
	if err != nil {
		return standIn{}, err
	}
	undo := func(ctx context.Context) error {
		e.mu.Lock()
		if in, ok := e.standIns[uid]; ok {
			for orig, ip := range e.standInIPs {
				if ip == in.IP {
					delete(e.standInIPs, orig)
				}
			}
		}
		delete(e.standIns, uid)
		e.mu.Unlock()
		return e.Client.DeletePod(ctx, sa.Pod.Name)
	}
	type reg struct {
		ep  suite.Endpoint
		err error
	}
	regc := make(chan reg, 1)
	go func() {
		ep, err := e.registered(ctx, string(sa.Pod.UID), sa.Pod.Name, o.Timeout)
		regc <- reg{ep, err}
	}()
	links, lerr := e.Client.ShapingQdiscs(ctx, sa, e.CNIConfDir, o.Timeout)
	r := <-regc
	if err := errors.Join(r.err, lerr); err != nil {
		return standIn{}, errors.Join(err, undo(context.WithoutCancel(ctx)))
	}
	return standIn{agent: sa, ep: r.ep, links: links, undo: undo}, nil
}

// shaperOf names what made a shaped pod's qdiscs, read off their devices:
// Calico's Felix names its ifb "bwcali..." and shapes Calico's "cali..."
// veths (Calico's conflist chains no bandwidth plugin), the CNI bandwidth
// plugin names its ifb "bwp...". The rows' burst label carries it
// ("537MB (Calico Felix)").
func shaperOf(links []LinkTC) string {
	for _, l := range links {
		switch {
		case strings.HasPrefix(l.Name, "bwcali"):
			return "Calico Felix"
		case strings.HasPrefix(l.Name, "bwp"):
			return "CNI bandwidth plugin"
		}
	}
	for _, l := range links {
		if strings.HasPrefix(l.Name, "cali") && slices.ContainsFunc(l.Qdiscs, func(q Qdisc) bool { return q.Kind == "tbf" }) {
			return "Calico Felix"
		}
	}
	return "CNI"
}

// Rewrite implements suite.Rewriter: the shaped pod stands in for the pod
// the change named, and the steps say which burst the CNI chose.
func (e *Env) Rewrite(st suite.Step) suite.Step {
	st = e.svc.rewrite(st)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ep := range []*suite.Endpoint{&st.Src, &st.Dst} {
		if in, ok := e.standIns[ep.ID]; ok {
			st.Connection = strings.ReplaceAll(st.Connection, ep.Name, in.Name)
			*ep = in
			st.Applied = e.applied
		}
	}
	// A wire watch looks for the stood-in pod's flow by address: the
	// stand-in's address, as its flow now comes from it.
	if w := st.Spec.Watch; w != nil {
		for orig, in := range e.standInIPs {
			if w.Src == orig || w.Dst == orig {
				cp := *w
				if cp.Src == orig {
					cp.Src = in
				}
				if cp.Dst == orig {
					cp.Dst = in
				}
				st.Spec.Watch, w = &cp, &cp
			}
		}
	}
	return st
}

// standIn records that the pod at orig is stood in for by the one at
// in (e.mu held).
func (e *Env) standIn(orig, in string) {
	if e.standInIPs == nil {
		e.standInIPs = map[string]string{}
	}
	e.standInIPs[orig] = in
}

// registered waits until the shaped pod's agent is online on the server
// and returns it as an endpoint.
func (e *Env) registered(ctx context.Context, uid, name string, timeout time.Duration) (suite.Endpoint, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		as, err := e.Server.Agents(wctx, false)
		for _, a := range as {
			if a.PodUID == uid && a.Status != "offline" {
				return suite.Endpoint{ID: a.PodUID, Name: a.PodName, Node: a.NodeName, IP: a.PodIP, ResponderAddr: a.ResponderAddr}, nil
			}
		}
		select {
		case <-wctx.Done():
			return suite.Endpoint{}, fmt.Errorf("shaped agent %s did not register with the server within %v (last error: %v)", name, timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// drainPeer picks the agent pod the draining flow goes to or comes from:
// the first ready pod (by node, then name) on another node, else on the
// same one.
func drainPeer(agents []Agent, node string) *Agent {
	var cands []Agent
	for _, a := range agents {
		if !a.HostNetwork && a.Ready && a.Component != "shaped" {
			cands = append(cands, a)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return (cands[i].Node != node) && (cands[j].Node == node) })
	if len(cands) == 0 {
		return nil
	}
	return &cands[0]
}

// drain runs one unthrottled TCP flow through the shaped direction as a
// run of its own (to the shaped pod when only its ingress is limited).
func (e *Env) drain(ctx context.Context, shaped suite.Endpoint, peer Agent, ingress bool) *DrainResult {
	d := e.DrainTime
	if d <= 0 {
		d = 3 * time.Second
	}
	src, dst := shaped.ID, peer.UID
	srcName, dstName := shaped.Name, peer.Name
	if ingress {
		src, dst, srcName, dstName = dst, src, dstName, srcName
	}
	res := &DrainResult{Connection: "burst drain " + srcName + " -> " + dstName, Src: srcName, Dst: dstName}
	spec := probe.Spec{Kind: probe.KindTCP, Duration: probe.Duration(d), Interval: probe.Duration(100 * time.Millisecond), Timeout: probe.Duration(10 * time.Second)}
	excl := true
	run, err := e.Server.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: src, Dst: dst, Type: api.TypeProbe, Spec: &spec, Exclusive: &excl}}})
	if err != nil {
		res.Err = fmt.Sprintf("create the draining run: %v", err)
		return res
	}
	deadline := time.Now().Add(d + time.Minute)
	for run.State == "" || run.State == api.RunRunning {
		if time.Now().After(deadline) || ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = e.Server.CancelRun(cctx, run.ID, "draining flow took too long")
			cancel()
			res.Err = fmt.Sprintf("run %s did not finish within %v", run.ID, d+time.Minute)
			return res
		}
		time.Sleep(500 * time.Millisecond)
		if run, err = e.Server.GetRun(ctx, run.ID); err != nil {
			res.Err = fmt.Sprintf("poll run: %v", err)
			return res
		}
	}
	if len(run.Tasks) != 1 || run.Tasks[0].State != api.StateSucceeded {
		res.Err = fmt.Sprintf("run %s ended %s", run.ID, run.State)
		return res
	}
	var r probe.Result
	if err := json.Unmarshal(run.Tasks[0].Result, &r); err != nil {
		res.Err = fmt.Sprintf("result: %v", err)
		return res
	}
	res.ThroughputBps = r.ThroughputBps
	return res
}

// quantity writes a rate in bits/s as an annotation's quantity ("" for 0).
func quantity(bps uint64) string {
	switch {
	case bps == 0:
		return ""
	case bps%1e9 == 0:
		return fmt.Sprintf("%dG", bps/1e9)
	case bps%1e6 == 0:
		return fmt.Sprintf("%dM", bps/1e6)
	case bps%1e3 == 0:
		return fmt.Sprintf("%dk", bps/1e3)
	}
	return fmt.Sprint(bps)
}

// tbfBurst is the largest tbf burst among the links, in bytes.
func tbfBurst(links []LinkTC) uint32 {
	var b uint32
	for _, l := range links {
		for _, q := range l.Qdiscs {
			if q.Kind == "tbf" && q.Burst > b {
				b = q.Burst
			}
		}
	}
	return b
}

// waitTimeout bounds starting a pod, a hold or a Service and waiting for
// it (Env.Timeout, default 2 min).
func (e *Env) waitTimeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return 2 * time.Minute
}

// agentNamed returns the agent whose pod is named name (the last one
// listed when names repeat), or nil.
func agentNamed(agents []Agent, name string) *Agent {
	var member *Agent
	for i := range agents {
		if agents[i].Name == name {
			member = &agents[i]
		}
	}
	return member
}

// NodeLabels implements suite.NodeLabeler: the labels of the cluster's
// Node objects, by node name.
func (e *Env) NodeLabels(ctx context.Context) (map[string]map[string]string, error) {
	if e.Client == nil {
		return nil, nil
	}
	nodes, err := e.Client.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]string, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.Labels
	}
	return out, nil
}
