// Package suitetest holds what the suites' tests share: the agents of a
// small lab and a fake server that finishes every task with a predictable
// result.
package suitetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// LabAgents are the agents of a 2-node lab: two pods on node1, one on
// node2, and a host-network agent per node.
func LabAgents() []suite.Endpoint {
	return []suite.Endpoint{
		{ID: "u1", Name: "n1-p1", Node: "node1", IP: "10.244.1.2", ResponderAddr: "10.244.1.2:5201"},
		{ID: "u2", Name: "n1-p2", Node: "node1", IP: "10.244.1.3", ResponderAddr: "10.244.1.3:5201"},
		{ID: "u3", Name: "n2-p1", Node: "node2", IP: "10.244.2.2", ResponderAddr: "10.244.2.2:5201"},
		{ID: "h1", Name: "node1", Node: "node1", IP: "10.170.0.11", ResponderAddr: "10.170.0.11:5201", HostNetwork: true},
		{ID: "h2", Name: "node2", Node: "node2", IP: "10.170.0.12", ResponderAddr: "10.170.0.12:5201", HostNetwork: true},
	}
}

// FakeAPI is a server that finishes every task on the second poll with a
// result derived from the task's spec and its position, so medians are
// predictable.
type FakeAPI struct {
	mu        sync.Mutex // guards the fields below
	agents    []api.Agent
	runs      map[string]*api.Run
	Created   []api.RunCreate
	polls     map[string]int
	Cancelled []string
	Never     bool // tasks never finish
	FailTask  int  // 1-based task index that fails (0: none)
}

// NewFakeAPI returns a server whose agents are LabAgents and one offline
// agent.
func NewFakeAPI() *FakeAPI {
	f := &FakeAPI{runs: map[string]*api.Run{}, polls: map[string]int{}}
	for _, e := range LabAgents() {
		f.agents = append(f.agents, api.Agent{PodUID: e.ID, PodName: e.Name, NodeName: e.Node, PodIP: e.IP,
			ResponderAddr: e.ResponderAddr, HostNetwork: e.HostNetwork, Status: "free"})
	}
	f.agents = append(f.agents, api.Agent{PodUID: "gone", PodName: "n9-p1", NodeName: "node9", Status: "offline"})
	return f
}

// Agents implements suite.API.
func (f *FakeAPI) Agents(context.Context, bool) ([]api.Agent, error) { return f.agents, nil }

// CreateRun implements suite.API.
func (f *FakeAPI) CreateRun(_ context.Context, rc api.RunCreate) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Created = append(f.Created, rc)
	id := fmt.Sprintf("run%d", len(f.Created))
	run := &api.Run{ID: id, Suite: rc.Suite, State: api.RunRunning, Params: rc.Params, AllowConcurrency: rc.AllowConcurrency}
	// Tasks come back in reverse id order, to check that callers sort.
	for i := len(rc.Tasks) - 1; i >= 0; i-- {
		rt := rc.Tasks[i]
		if rt.Spec.Target != "" {
			return api.Run{}, errors.New("spec.target set")
		}
		spec, _ := json.Marshal(rt.Spec)
		run.Tasks = append(run.Tasks, api.TaskV2{ID: int64(i + 1), TaskID: fmt.Sprintf("%s-t%d", id, i+1), Spec: spec,
			SrcPodUID: rt.Src, DstPodUID: rt.Dst, State: api.StatePending, TimeoutS: 1})
	}
	f.runs[id] = run
	return *run, nil
}

// GetRun implements suite.API.
func (f *FakeAPI) GetRun(_ context.Context, id string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.runs[id]
	f.polls[id]++
	if f.Never {
		run.Tasks[0].State = api.StateRunning
		return *run, nil
	}
	if f.polls[id] >= 2 {
		for i := range run.Tasks {
			t := &run.Tasks[i]
			var sp probe.Spec
			_ = json.Unmarshal(t.Spec, &sp)
			if int(t.ID) == f.FailTask {
				t.State, t.Reason = api.StateFailed, "connection refused"
				continue
			}
			t.State = api.StateSucceeded
			t.Result, _ = json.Marshal(FakeResult(sp.Kind, float64(t.ID)))
		}
		run.State = api.RunSucceeded
	} else {
		run.Tasks[len(run.Tasks)-1].State = api.StateRunning
	}
	return *run, nil
}

// CancelRun implements suite.API.
func (f *FakeAPI) CancelRun(_ context.Context, id, _ string) (api.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Cancelled = append(f.Cancelled, id)
	return *f.runs[id], nil
}

// FakeResult is a result of the given kind whose figures derive from v.
func FakeResult(kind string, v float64) *probe.Result {
	r := &probe.Result{Kind: kind}
	switch kind {
	case probe.KindTCP:
		r.ThroughputBps = &probe.SenderReceiver{Sender: v * 1e9, Receiver: v * 1e9}
		r.CPUPct = &probe.SenderReceiver{Sender: v, Receiver: v}
		r.Bytes = &probe.SenderReceiver{Sender: v * 1e8, Receiver: v * 1e8}
	case probe.KindUDP:
		r.ThroughputBps = &probe.SenderReceiver{Sender: 5e8, Receiver: 5e8}
		r.LossPct = probe.Float(0)
	case probe.KindRR, probe.KindPing:
		r.RTTms = &probe.Summary{Avg: v / 100, Min: v / 200, Max: v / 50}
	}
	return r
}

// LabCaps are the capabilities of a lab whose kernel can police.
func LabCaps() suite.Caps {
	return suite.Caps{Have: []suite.Cap{suite.CapNodeQdisc, suite.CapPodQdisc, suite.CapPodShaping, suite.CapPodBurst, suite.CapPolice, suite.CapVXLANTOS, suite.CapService}}
}

// VXLANLabCaps are LabCaps on a VXLAN lab: the path is encapsulated and
// the pods' MTU 50 bytes below the underlay's.
func VXLANLabCaps() suite.Caps {
	c := LabCaps()
	c.Encap, c.PathMTU = suite.EncapVXLAN, 1450
	return c
}
