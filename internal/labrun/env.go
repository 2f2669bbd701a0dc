package labrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/qos"
	"github.com/cnperf/cnperf/internal/suite"
)

// Links resolves a lab member's links; *lab.Lab implements it.
type Links interface {
	Link(role, member string) (netns, dev string, err error)
}

// Services makes the lab's ClusterIP-style Services; *lab.Lab implements
// it.
type Services interface {
	ServiceFor(pod string, port int) (lab.Service, error)
	AddService(ctx context.Context, pod string, port int) (lab.Service, error)
	RemoveService(ctx context.Context, svc lab.Service) error
}

// Policies makes the lab's NetworkPolicy-like rules; *lab.Lab implements
// it.
type Policies interface {
	AddPolicies(ctx context.Context, pod string, p lab.Policies) (func(context.Context) error, error)
}

// Env is a lab as the environment of a suite: it makes the suite's
// changes with netlink from this process (traffic control on the lab's
// links, tos inherit on its VXLAN devices) and Services with iptables in
// the lab's node namespaces, so it needs CAP_NET_ADMIN like the lab
// itself.
type Env struct {
	links    Links
	services Services // nil when the lab given cannot make Services
	policies Policies // nil when the lab given cannot make policies
	// servicesOK says why Services cannot be made here (nil: they can).
	servicesOK func() error

	// zones is the number of zones the nodes are labelled into (0: none;
	// see Config.Zones).
	zones int

	mu  sync.Mutex
	via map[string]string // pod → its Service's IP:PORT, while made
	// show reads a link's qdiscs and detect the kernel's features; tests
	// replace them.
	show   func(qos.Target) (qos.State, error)
	detect func(ctx context.Context, nsPath string, names ...string) (qos.Features, error)

	// mtu and encap describe the lab's pod path (from a *lab.Lab).
	mtu   int
	encap string

	once sync.Once
	caps suite.Caps
}

// NewEnv returns the environment of the lab whose links l resolves.
func NewEnv(l Links) *Env {
	e := &Env{links: l, show: qos.Show, detect: qos.Detect, servicesOK: lab.ServicesAvailable, via: map[string]string{}}
	e.services, _ = l.(Services)
	e.policies, _ = l.(Policies)
	if lb, ok := l.(*lab.Lab); ok {
		e.mtu, e.encap = pathOf(lb)
	}
	return e
}

// pathOf says what a lab's pod path is like: the pods' MTU and how the
// lab's backend encapsulates traffic between nodes.
func pathOf(l *lab.Lab) (mtu int, encap string) {
	if len(l.Pods) > 0 {
		mtu = l.Pods[0].MTU
	}
	if l.Config.Backend == lab.BackendVXLAN {
		encap = suite.EncapVXLAN
	}
	return mtu, encap
}

// detectTimeout bounds the detection of the kernel's features.
const detectTimeout = 10 * time.Second

// Caps implements suite.Env: everything a suite asks for; the police
// action only where this machine's kernel has it (else it is
// unsupported, with the kernel's reason).
func (e *Env) Caps() suite.Caps {
	e.once.Do(func() {
		e.caps = suite.Caps{PathMTU: e.mtu, Encap: e.encap,
			Have: []suite.Cap{suite.CapNodeQdisc, suite.CapPodQdisc, suite.CapPodShaping, suite.CapPodBurst, suite.CapVXLANTOS},
			Why:  map[suite.Cap]string{suite.CapPodAnnotations: "the lab limits a pod with traffic control on its veth, not through annotations a CNI honours"}}
		switch {
		case e.services == nil:
			e.caps.Why[suite.CapService] = "this lab cannot make Services"
		case e.servicesOK() != nil:
			e.caps.Why[suite.CapService] = e.servicesOK().Error()
		default:
			e.caps.Have = append(e.caps.Have, suite.CapService)
		}
		switch {
		case e.policies == nil:
			e.caps.Why[suite.CapNetworkPolicy] = "this lab cannot make policies"
		case e.servicesOK() != nil: // the same iptables
			e.caps.Why[suite.CapNetworkPolicy] = e.servicesOK().Error()
		default:
			e.caps.Have = append(e.caps.Have, suite.CapNetworkPolicy)
		}
		ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
		defer cancel()
		needs := qos.Police{}.Needs()
		feats, err := e.detect(ctx, "", needs...)
		if err != nil {
			e.caps.Unsupported = map[suite.Cap]string{suite.CapPolice: fmt.Sprintf("detect the kernel's features: %v", err)}
			return
		}
		for _, n := range needs {
			if f, _ := feats.Get(n); !f.Present {
				e.caps.Unsupported = map[suite.Cap]string{suite.CapPolice: (&qos.UnsupportedError{Feature: n, Reason: f.Err}).Error()}
				return
			}
		}
		e.caps.Have = append(e.caps.Have, suite.CapPolice)
	})
	return e.caps
}

// roles are the links each change goes on.
var roles = map[suite.Cap]string{
	suite.CapNodeQdisc:  lab.LinkNodeUplink,
	suite.CapVXLANTOS:   lab.LinkNodeUplink,
	suite.CapPodQdisc:   lab.LinkPod,
	suite.CapPodShaping: lab.LinkPodHost,
	suite.CapPolice:     lab.LinkPodHost,
}

// target resolves the link of a change and builds its set-up (nil for a
// change without one).
func (e *Env) target(c suite.Change) (qos.Target, qos.Setup, error) {
	role, ok := roles[c.What]
	if !ok {
		return qos.Target{}, nil, fmt.Errorf("the lab cannot make a %s change", c.What)
	}
	ns, dev, err := e.links.Link(role, c.Member)
	if err != nil {
		return qos.Target{}, nil, err
	}
	t := qos.Target{NetNS: ns, Link: dev}
	if c.QoS == nil {
		if c.What != suite.CapVXLANTOS {
			return t, nil, fmt.Errorf("%s change without a set-up", c.What)
		}
		return t, nil, nil
	}
	setup, err := qos.Build(*c.QoS)
	if err != nil {
		return t, nil, err
	}
	return t, setup, nil
}

// Check implements suite.Checker: the member and its link exist, the
// kernel takes the set-up, and a set-up on a node's uplink stays below the
// rate the lab gave that link (else the bottleneck would never hold a
// queue).
func (e *Env) Check(_ context.Context, c suite.Change) error {
	if c.What == suite.CapNetworkPolicy {
		if c.Policy == nil {
			return errors.New("network-policy change without policies")
		}
		return c.Policy.Check()
	}
	if c.What == suite.CapService {
		if e.services == nil {
			return errors.New("this lab cannot make Services")
		}
		_, err := e.services.ServiceFor(c.Member, c.Port)
		return err
	}
	t, _, err := e.target(c)
	if err != nil || c.What != suite.CapNodeQdisc || c.QoS == nil || c.QoS.RateBps == 0 {
		return err
	}
	st, err := e.show(t)
	if err != nil {
		return err
	}
	if r, ok := st.Root(); ok && r.Kind == "tbf" && r.RateBps != 0 && c.QoS.RateBps > r.RateBps {
		return fmt.Errorf("bottleneck rate %s is above the link's rate %s (the lab's underlay rate on %s): the bottleneck would never hold a queue",
			qos.FormatBps(c.QoS.RateBps), qos.FormatBps(r.RateBps), c.Member)
	}
	return nil
}

// Apply implements suite.Env.
func (e *Env) Apply(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if c.What == suite.CapService {
		return e.applyService(ctx, c)
	}
	if c.What == suite.CapNetworkPolicy {
		return e.applyPolicies(ctx, c)
	}
	t, setup, err := e.target(c)
	if err != nil {
		return nil, err
	}
	switch c.What {
	case suite.CapVXLANTOS:
		return e.inheritTOS(t.NetNS, c.Member)
	case suite.CapNodeQdisc:
		return e.applyUplink(ctx, t, setup)
	}
	if err := qos.Apply(ctx, t, setup); err != nil {
		return nil, err
	}
	return func(context.Context) error { return qos.Remove(t, setup) }, nil
}

// applyUplink puts setup on a node's uplink in place of the lab's own
// tbf (the underlay's rate), which the undo puts back.
func (e *Env) applyUplink(ctx context.Context, t qos.Target, setup qos.Setup) (func(context.Context) error, error) {
	st, err := e.show(t)
	if err != nil {
		return nil, err
	}
	var prev *qos.TBF
	if r, ok := st.Root(); ok && r.Kind == "tbf" {
		prev = &qos.TBF{Rate: r.RateBps, BurstBytes: r.BurstBytes, LimitBytes: r.LimitBytes}
		t.RateBps = r.RateBps
	}
	if err := qos.Apply(ctx, t, setup); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		err := qos.Remove(t, setup)
		if prev != nil {
			t.RateBps = 0
			err = errors.Join(err, qos.Apply(ctx, t, *prev))
		}
		return err
	}, nil
}

// inheritTOS makes the node's VXLAN devices copy the inner TOS; the undo
// restores each device's setting.
func (e *Env) inheritTOS(ns, node string) (func(context.Context) error, error) {
	devs, err := qos.VXLANTOS(ns)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("node %s has no vxlan device: tos inherit needs the vxlan backend", node)
	}
	restore := func(done map[string]uint8) error {
		var errs []error
		for dev, tos := range done {
			errs = append(errs, qos.SetVXLANTOS(ns, dev, tos))
		}
		return errors.Join(errs...)
	}
	done := map[string]uint8{}
	for dev, tos := range devs {
		if err := qos.SetVXLANTOS(ns, dev, qos.TOSInherit); err != nil {
			return nil, errors.Join(fmt.Errorf("node %s: %w", node, err), restore(done))
		}
		done[dev] = tos
	}
	return func(context.Context) error { return restore(done) }, nil
}

// applyService makes a Service in front of the pod c.Member (see
// lab.Lab.AddService); Rewrite then points the phase's Service steps to
// it, and the undo removes it.
func (e *Env) applyService(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if e.services == nil {
		return nil, errors.New("this lab cannot make Services")
	}
	svc, err := e.services.AddService(ctx, c.Member, c.Port)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.via[c.Member] = svc.Addr()
	e.mu.Unlock()
	return func(ctx context.Context) error {
		e.mu.Lock()
		delete(e.via, c.Member)
		e.mu.Unlock()
		return e.services.RemoveService(ctx, svc)
	}, nil
}

// Rewrite implements suite.Rewriter: a step through a Service dials the
// Service made in front of its destination.
func (e *Env) Rewrite(st suite.Step) suite.Step {
	if !st.Service {
		return st
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.via[st.Dst.Name]; ok {
		st.Via = v
	}
	return st
}

// applyPolicies has the lab's policy controller turn the change's
// policies into iptables rules in the node of the pod c.Member (see
// lab.Lab.AddPolicies); the undo removes them.
func (e *Env) applyPolicies(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if e.policies == nil {
		return nil, errors.New("this lab cannot make policies")
	}
	if c.Policy == nil {
		return nil, errors.New("network-policy change without policies")
	}
	if err := c.Policy.Check(); err != nil {
		return nil, err
	}
	p := c.Policy
	return e.policies.AddPolicies(ctx, c.Member, lab.Policies{Count: p.Count, Selecting: p.Selecting, From: p.From, Port: p.Port, Deny: p.Deny})
}

// NodeLabels implements suite.NodeLabeler: with zones, node i (from 0)
// of the lab carries the label pairplan.DefaultZoneLabel, zone-a, zone-b,
// ... by i modulo the zones.
func (e *Env) NodeLabels(context.Context) (map[string]map[string]string, error) {
	lb, ok := e.links.(*lab.Lab)
	if !ok || e.zones <= 0 {
		return nil, nil
	}
	out := make(map[string]map[string]string, len(lb.Nodes))
	for i, n := range lb.Nodes {
		out[n.Name] = map[string]string{pairplan.DefaultZoneLabel: ZoneName(i % e.zones)}
	}
	return out, nil
}

// ZoneName names zone i (from 0): zone-a … zone-z, then zone-26, ...
func ZoneName(i int) string {
	if i < 26 {
		return "zone-" + string(rune('a'+i))
	}
	return fmt.Sprintf("zone-%d", i)
}
