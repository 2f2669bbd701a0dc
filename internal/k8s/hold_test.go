package k8s

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

var holdAgents = []Agent{
	{Name: "cnperf-agent-a1", UID: "u-a1", Node: "n1", Ready: true},
	{Name: "cnperf-agent-host-1", UID: "u-h1", Node: "n1", HostNetwork: true, Ready: true},
	{Name: "cnperf-agent-a2", UID: "u-a2", Node: "n2", Ready: true},
	{Name: "cnperf-agent-host-2", UID: "u-h2", Node: "n2", HostNetwork: true, Ready: true},
	{Name: "cnperf-agent-host-9", UID: "u-h9", Node: "n2", HostNetwork: true, Ready: false},
}

// TestHoldEnds: a pod's qdisc is held by the pod's own agent; a node's by
// its host-network agent, toward the host-network agent of another node;
// agents that are not ready are never chosen.
func TestHoldEnds(t *testing.T) {
	htb := &qosspec.Spec{Setup: qosspec.SpecHTBPriority, RateBps: 1e9, DSCP: []int{46}}
	for _, c := range []struct {
		change   suite.Change
		src, dst string
		err      string
	}{
		{suite.Change{What: suite.CapPodQdisc, Member: "cnperf-agent-a2", QoS: htb}, "u-a2", "u-a2", ""},
		{suite.Change{What: suite.CapNodeQdisc, Member: "n2", QoS: htb}, "u-h2", "u-h1", ""},
		{suite.Change{What: suite.CapNodeQdisc, Member: "n1", QoS: htb}, "u-h1", "u-h2", ""},
		{suite.Change{What: suite.CapPodQdisc, Member: "cnperf-agent-host-2", QoS: htb}, "", "", "no ready agent pod"},
		{suite.Change{What: suite.CapNodeQdisc, Member: "n3", QoS: htb}, "", "", "host-network agent on node n3"},
		{suite.Change{What: suite.CapPolice, Member: "cnperf-agent-a2", QoS: htb}, "", "", "cannot make"},
	} {
		src, dst, err := holdEnds(holdAgents, c.change)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.change, err, c.err)
			}
			continue
		}
		if err != nil || src.UID != c.src || dst.UID != c.dst {
			t.Errorf("%s: %s → %s, %v; want %s → %s", c.change, src.UID, dst.UID, err, c.src, c.dst)
		}
	}
}

// holdServer is a server whose hold task runs after startAfter polls
// (or ends with endState), and is cancelled by CancelRun; its agent
// acknowledges the cancellation ackAfter polls later (never when
// negative), with stopReason.
type holdServer struct {
	suite.API
	mu          sync.Mutex
	created     []api.RunCreate
	polls       int
	startAfter  int
	endState    string // the task ends so instead of running
	state       string
	cancelled   []string
	ackAfter    int
	stopReason  string
	sinceCancel int        // polls since the cancellation
	stoppedAt   *time.Time // the acknowledgement
}

func (s *holdServer) CreateRun(_ context.Context, rc api.RunCreate) (api.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, rc)
	s.state = api.StateDispatched
	return s.run(), nil
}

func (s *holdServer) run() api.Run {
	t := api.TaskV2{TaskID: "t1", State: s.state, Reason: "because", StoppedAt: s.stoppedAt}
	if s.state != "" {
		t.DispatchedAt = &time.Time{}
	}
	if s.stoppedAt != nil {
		t.StopReason = s.stopReason
	}
	return api.Run{ID: "r1", State: api.RunRunning, Tasks: []api.TaskV2{t}}
}

func (s *holdServer) GetRun(context.Context, string) (api.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if len(s.cancelled) > 0 {
		s.sinceCancel++
		if s.ackAfter >= 0 && s.sinceCancel >= s.ackAfter && s.stoppedAt == nil {
			s.stoppedAt = &time.Time{}
		}
	}
	if s.polls >= s.startAfter && s.state == api.StateDispatched {
		s.state = api.StateRunning
		if s.endState != "" {
			s.state = s.endState
		}
	}
	return s.run(), nil
}

func (s *holdServer) CancelRun(_ context.Context, id, reason string) (api.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelled = append(s.cancelled, id+": "+reason)
	s.state = api.StateCancelled
	return s.run(), nil
}

// TestHoldOn: the change is made once the hold runs (its life the phase's
// need plus the slack), and undone by cancelling it; a hold that fails is
// an error with the agent's reason; one that ended by itself before the
// undo says the phase outlived it; one that never starts is cancelled.
func TestHoldOn(t *testing.T) {
	htb := &qosspec.Spec{Setup: qosspec.SpecHTBPriority, RateBps: 1e9, DSCP: []int{46}}
	c := suite.Change{What: suite.CapNodeQdisc, Member: "n2", QoS: htb, For: 3 * time.Second}
	src, dst := holdAgents[3], holdAgents[1]
	ctx := context.Background()

	s := &holdServer{startAfter: 2, ackAfter: 3, stopReason: "cancelled by the server"}
	e := &Env{Server: s, HoldSlack: 10 * time.Second}
	undo, err := e.holdOn(ctx, c, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	task := s.created[0].Tasks[0]
	if task.Type != api.TypeQoSHold || task.Src != "u-h2" || task.Dst != "u-h1" || task.QoS != htb || task.Spec.Duration.D() != 13*time.Second {
		t.Errorf("hold task %+v (spec %+v)", task, task.Spec)
	}
	if len(s.cancelled) != 0 {
		t.Fatalf("cancelled before the undo: %v", s.cancelled)
	}
	if err := undo(ctx); err != nil || len(s.cancelled) != 1 || s.stoppedAt == nil {
		t.Errorf("undo: %v, cancelled %v, returned before the agent acknowledged: %v", err, s.cancelled, s.stoppedAt == nil)
	}
	if h := e.Holds(); len(h) != 1 || h[0].Agent != src.Name || h[0].RunID != "r1" {
		t.Errorf("holds %+v", h)
	}

	// The agent never acknowledges, or could not remove the set-up: the
	// undo says so, naming the node and the task, within HoldStopWait.
	for _, tc := range []struct {
		s    *holdServer
		want string
	}{
		{&holdServer{startAfter: 1, ackAfter: -1}, "did not acknowledge removing the set-up within 300ms"},
		{&holdServer{startAfter: 1, ackAfter: 1, stopReason: "cancelled by the server: " + api.ReasonRemoveFailed + ": EBUSY"}, "could not remove the set-up of task t1: cancelled by the server: " + api.ReasonRemoveFailed},
	} {
		e = &Env{Server: tc.s, HoldStopWait: 300 * time.Millisecond}
		undo, err := e.holdOn(ctx, c, src, dst)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err = undo(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "node n2") || !strings.Contains(err.Error(), "t1") {
			t.Errorf("undo: %v, want an error naming node n2, task t1 and %q", err, tc.want)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Errorf("undo took %v, bound 300ms", d)
		}
	}

	s = &holdServer{startAfter: 1, endState: api.StateFailed}
	e = &Env{Server: s}
	if _, err := e.holdOn(ctx, c, src, dst); err == nil || !strings.Contains(err.Error(), "ended failed: because") {
		t.Errorf("failed hold: %v", err)
	}

	s = &holdServer{startAfter: 1}
	e = &Env{Server: s}
	undo, err = e.holdOn(ctx, c, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	s.state = api.StateSucceeded // its duration passed during the phase
	if err := undo(ctx); err == nil || !strings.Contains(err.Error(), "before its phase did") {
		t.Errorf("undo of a hold that ended by itself: %v", err)
	}

	s = &holdServer{startAfter: 1 << 30, ackAfter: 1}
	e = &Env{Server: s, Timeout: 300 * time.Millisecond}
	if _, err := e.holdOn(ctx, c, src, dst); err == nil || !strings.Contains(err.Error(), "did not start") || len(s.cancelled) != 1 {
		t.Errorf("hold that never starts: %v, cancelled %v", err, s.cancelled)
	}
}

// TestNodeQdiscOptIn: without allow-node-qdisc the cluster lacks the
// node qdisc, and the refusal says what it would change and how to opt
// in; with it, the capability is there.
func TestNodeQdiscOptIn(t *testing.T) {
	sets := AgentSets{Host: true, QoS: true}
	err := (&Env{Sets: sets}).Caps().Lacks("qos-priority", suite.CapNodeQdisc)
	var le *suite.LacksError
	if !errors.As(err, &le) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"root of the node's interface toward the other node", "remove it afterwards", "--set allow-node-qdisc=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	caps := (&Env{AllowNodeQdisc: true, Sets: sets}).Caps()
	if !caps.Has(suite.CapNodeQdisc) || !caps.Has(suite.CapPodQdisc) || !caps.AsIs {
		t.Errorf("caps with the opt-in: %+v", caps)
	}
	if _, err := (&Env{}).hold(context.Background(), suite.Change{What: suite.CapNodeQdisc, Member: "n1",
		QoS: &qosspec.Spec{Setup: qosspec.SpecPfifoFast}}); err == nil || !strings.Contains(err.Error(), "allow-node-qdisc") {
		t.Errorf("hold without the opt-in: %v", err)
	}
}

// TestEnvCapsSayThePath: a cluster's Caps say it is measured as it is,
// limits pods through annotations, and carry the path Open read from
// the facts (pod MTU, VXLAN where the CNI's backend is).
func TestEnvCapsSayThePath(t *testing.T) {
	for _, c := range []struct {
		facts     Facts
		wantEncap string
	}{
		{Facts{Backend: "vxlan", PodMTU: 1450}, suite.EncapVXLAN},
		{Facts{Backend: "host-gw", PodMTU: 1500}, suite.EncapNone},
		{Facts{}, suite.EncapNone},
	} {
		e := &Env{PathMTU: c.facts.PodMTU, Encap: c.facts.Encap()}
		caps := e.Caps()
		if !caps.AsIs || caps.PathMTU != c.facts.PodMTU || caps.Encap != c.wantEncap || !caps.Has(suite.CapPodAnnotations) {
			t.Errorf("facts %+v: caps %+v", c.facts, caps)
		}
	}
}

// TestVXLANInheritOnACluster: tos inherit on the nodes' VXLAN devices
// (qos-priority's vxlan-inherit) is a capability of a cluster only with
// the host and qos agent sets and the node opt-in; without them the
// refusal names what is missing; the node's host-network agent holds it;
// qos-priority's vxlan-inherit variant is refused up front without it
// and planned with it on a VXLAN cluster.
func TestVXLANInheritOnACluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  *Env
		want string // in the refusal; "" for the capability
	}{
		{"default install", &Env{}, "deploy with --host-agents --qos-agents"},
		{"agent sets, no opt-in", &Env{Sets: AgentSets{Host: true, QoS: true}}, "copy the inner TOS to the outer header"},
		{"agent sets and opt-in", &Env{Sets: AgentSets{Host: true, QoS: true}, AllowNodeQdisc: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env.Encap = suite.EncapVXLAN
			caps := tc.env.Caps()
			err := caps.Lacks("qos-priority", suite.CapVXLANTOS)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("lacks %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "allow-node-qdisc=true") {
				t.Fatalf("refusal %v, want one naming %q and allow-node-qdisc=true", err, tc.want)
			}
			r := &suite.Runner{API: suitetest.NewFakeAPI(), Env: tc.env, Poll: time.Millisecond}
			s, _ := builtin.Registry().Get("qos-priority")
			_, phases, err := r.Plan(context.Background(), s, suite.Options{Time: time.Second, Repeat: 1,
				Set: map[string]string{"variants": "vxlan-inherit", "placement": "cross-node"}})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), string(suite.CapVXLANTOS)) {
					t.Errorf("qos-priority vxlan-inherit planned (%v), want a refusal naming %s", err, suite.CapVXLANTOS)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tos := 0
			for _, ph := range phases {
				for _, c := range ph.Changes {
					if c.What == suite.CapVXLANTOS {
						tos++
					}
				}
			}
			if tos == 0 {
				t.Errorf("phases %+v: no vxlan-tos change", phases)
			}
		})
	}
	// A metadata-mode tunnel (Cilium's cilium_vxlan) ignores tos inherit:
	// refused with that reason even with the opt-in.
	md := &Env{Sets: AgentSets{Host: true, QoS: true}, AllowNodeQdisc: true, Encap: suite.EncapVXLAN, MetadataTunnels: []string{"cilium_vxlan"}}
	caps := md.Caps()
	if err := caps.Lacks("qos-priority", suite.CapVXLANTOS); err == nil || !strings.Contains(err.Error(), "cilium_vxlan is a metadata-mode VXLAN device") {
		t.Errorf("metadata-mode tunnel: refusal %v, want one naming cilium_vxlan and why", err)
	}
	if !slices.Equal(caps.MetadataTunnels, []string{"cilium_vxlan"}) || !caps.Has(suite.CapNodeQdisc) {
		t.Errorf("metadata-mode tunnel: caps %+v, want the device named and node qdiscs still offered", caps)
	}
	src, dst, err := holdEnds(holdAgents, suite.Change{What: suite.CapVXLANTOS, Member: "n2"})
	if err != nil || src.UID != "u-h2" || dst.UID != "u-h1" {
		t.Errorf("vxlan-tos hold on n2: %s → %s, %v; want the host agents u-h2 → u-h1", src.UID, dst.UID, err)
	}
	if _, err := (&Env{}).Apply(context.Background(), suite.Change{What: suite.CapVXLANTOS, Member: "n1"}); err == nil || !strings.Contains(err.Error(), "allow-node-qdisc") {
		t.Errorf("vxlan-tos without the opt-in: %v", err)
	}
}
