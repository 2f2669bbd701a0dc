package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// A qdisc change on a cluster (suite.CapPodQdisc, suite.CapNodeQdisc) is
// held by the agent that owns the interface, for the whole phase: the
// environment gives that agent a qos-hold task (api.TypeQoSHold) through
// the server, waits until it runs (the agent applies the set-up before it
// reports the start), and cancels it in the undo. The agent removes the
// set-up when it hears of the cancellation (within about a second) and
// then acknowledges it (the task's stopped_at); the undo waits for that,
// at most HoldStopWait, so the next phase starts without the set-up. The
// hold's duration, the phase's need (Change.For) plus HoldSlack, bounds
// its life on the agent itself: a run that dies leaves nothing behind for
// longer.

// DefaultHoldSlack is what a hold may outlive its phase's longest step:
// dispatch, the phase's polling, a loaded node.
const DefaultHoldSlack = time.Minute

// DefaultHoldStopWait is how long the undo of a hold waits for its
// agent's acknowledgement that the set-up is removed: the agent hears of
// the cancellation within about a second, on a loaded node later.
const DefaultHoldStopWait = 30 * time.Second

// nodeQdiscWhy says what a node qdisc would change, for the refusal
// without the opt-in.
const nodeQdiscWhy = "a qdisc on a node's interface changes the node's own network, for every pod on it: " +
	"the sending node's host-network agent would put the set-up (qos-priority's node-htb: the HTB priority tree) " +
	"at the root of the node's interface toward the other node, in place of the kernel's default qdisc there, " +
	"for each phase, and remove it afterwards (an interface with a qdisc of its own is refused, not replaced); " +
	"opt in with --set " + suite.SetAllowNodeQdisc + "=true"

// nodeVXLANWhy says what tos inherit would change, for the refusal
// without the opt-in.
const nodeVXLANWhy = "tos inherit changes the node's own network, for every pod on it: the node's host-network agent " +
	"would make each VXLAN device of the node (the CNI's: flannel.1, vxlan.calico, cilium_vxlan) copy the inner TOS " +
	"to the outer header for the phase (qos-priority's vxlan-inherit, the remedy for a mark lost at encapsulation), " +
	"and restore each device's own setting afterwards; opt in with --set " + suite.SetAllowNodeQdisc + "=true"

// holdEnds picks the agents of a hold among the agent pods that run: for
// a pod's qdisc the pod itself (and itself as the destination, which the
// hold does not use); for a node's qdisc the node's host-network agent
// and, as the destination whose route names the interface, the
// host-network agent of another node (the first by name).
func holdEnds(agents []Agent, c suite.Change) (src, dst Agent, err error) {
	ready := make([]Agent, 0, len(agents))
	for _, a := range agents {
		if a.Ready {
			ready = append(ready, a)
		}
	}
	sort.SliceStable(ready, func(i, j int) bool { return ready[i].Node < ready[j].Node })
	switch c.What {
	case suite.CapPodQdisc:
		for _, a := range ready {
			if a.Name == c.Member && !a.HostNetwork {
				return a, a, nil
			}
		}
		return src, dst, fmt.Errorf("no ready agent pod %s to hold %s", c.Member, c)
	case suite.CapNodeQdisc, suite.CapVXLANTOS:
		var found, other bool
		for _, a := range ready {
			switch {
			case !a.HostNetwork:
			case a.Node == c.Member && !found:
				src, found = a, true
			case a.Node != c.Member && !other:
				dst, other = a, true
			}
		}
		if !found || !other {
			return src, dst, fmt.Errorf("%s needs a ready host-network agent on node %s and on another node (cnperf-agent-host)", c, c.Member)
		}
		return src, dst, nil
	}
	return src, dst, fmt.Errorf("on Kubernetes cnperf cannot make the change %s", c)
}

// hold has the agent that owns the change's interface hold it; the undo
// ends the hold.
func (e *Env) hold(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if c.QoS == nil {
		return nil, fmt.Errorf("%s change without a set-up", c.What)
	}
	if c.What == suite.CapNodeQdisc && !e.AllowNodeQdisc {
		return nil, fmt.Errorf("%s refused: %s", c, nodeQdiscWhy)
	}
	if c.What == suite.CapVXLANTOS && !e.AllowNodeQdisc {
		return nil, fmt.Errorf("%s refused: %s", c, nodeVXLANWhy)
	}
	agents, err := e.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	src, dst, err := holdEnds(agents, c)
	if err != nil {
		return nil, err
	}
	return e.holdOn(ctx, c, src, dst)
}

// holdOn creates the hold from src (toward dst), waits until it runs and
// returns its undo.
func (e *Env) holdOn(ctx context.Context, c suite.Change, src, dst Agent) (func(context.Context) error, error) {
	slack := e.HoldSlack
	if slack <= 0 {
		slack = DefaultHoldSlack
	}
	need := c.For
	if need <= 0 {
		need = 5 * time.Minute
	}
	life := need + slack
	run, err := e.Server.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: src.UID, Dst: dst.UID, Type: api.TypeQoSHold,
		Spec: &probe.Spec{Duration: probe.Duration(life)}, QoS: c.QoS}}})
	if err != nil {
		return nil, fmt.Errorf("%s: create the hold on %s: %w", c, src.Name, err)
	}
	where := fmt.Sprintf("%s (node %s)", src.Name, src.Node)
	switch c.What {
	case suite.CapVXLANTOS:
		where = fmt.Sprintf("%s (node %s, its VXLAN devices)", src.Name, src.Node)
	case suite.CapNodeQdisc:
		where = fmt.Sprintf("%s (node %s, its interface toward %s)", src.Name, src.Node, dst.Node)
	}
	end := func(ctx context.Context, why string) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		got, err := e.Server.CancelRun(cctx, run.ID, why)
		if err != nil {
			return fmt.Errorf("%s: end the hold on %s (run %s): %w", c, where, run.ID, err)
		}
		return e.awaitStop(ctx, c, where, got)
	}
	timeout := e.waitTimeout()
	deadline := time.Now().Add(timeout)
	for {
		if len(run.Tasks) == 1 {
			switch st := run.Tasks[0].State; {
			case st == api.StateRunning:
				e.mu.Lock()
				e.holds = append(e.holds, Hold{Change: c.String(), Agent: src.Name, Node: src.Node, RunID: run.ID})
				e.mu.Unlock()
				return e.holdUndo(c, where, run.ID, end), nil
			case api.TerminalState(st):
				return nil, fmt.Errorf("%s: the hold on %s ended %s: %s", c, where, st, run.Tasks[0].Reason)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("%s: the hold on %s did not start within %v (state %s)", c, where, timeout, holdState(run)),
				ctx.Err(), end(ctx, "the hold did not start in time"))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		got, err := e.Server.GetRun(ctx, run.ID)
		if err == nil {
			run = got
		}
	}
}

// holdUndo ends a running hold. A hold that already ended by itself (its
// duration passed) means the phase ran longer than its hold: an error, as
// part of the phase ran without the set-up.
func (e *Env) holdUndo(c suite.Change, where, runID string, end func(context.Context, string) error) func(context.Context) error {
	return func(ctx context.Context) error {
		got, err := e.Server.GetRun(ctx, runID)
		if err == nil && len(got.Tasks) == 1 && api.TerminalState(got.Tasks[0].State) {
			t := got.Tasks[0]
			return fmt.Errorf("%s: the hold on %s ended (%s: %s) before its phase did, so part of the phase ran without it", c, where, t.State, t.Reason)
		}
		return end(ctx, "phase done")
	}
}

// awaitStop waits until the agent acknowledged the end of the cancelled
// hold (its task's stopped_at: the set-up is removed), at most
// HoldStopWait; a hold that was never dispatched, or that its agent ended
// by itself (its report came after the removal), needs no wait.
func (e *Env) awaitStop(ctx context.Context, c suite.Change, where string, run api.Run) error {
	wait := e.HoldStopWait
	if wait <= 0 {
		wait = DefaultHoldStopWait
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	for {
		if len(run.Tasks) != 1 {
			return fmt.Errorf("%s: the hold's run %s has %d tasks, want 1", c, run.ID, len(run.Tasks))
		}
		t := run.Tasks[0]
		switch {
		case t.StoppedAt != nil && strings.Contains(t.StopReason, api.ReasonRemoveFailed):
			return fmt.Errorf("%s: the agent %s could not remove the set-up of task %s: %s", c, where, t.TaskID, t.StopReason)
		case t.StoppedAt != nil, t.State != api.StateCancelled, t.DispatchedAt == nil:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: the hold on %s (task %s) was cancelled, but its agent did not acknowledge removing the set-up within %v: it may still be in place", c, where, t.TaskID, wait)
		case <-time.After(200 * time.Millisecond):
		}
		if got, err := e.Server.GetRun(ctx, run.ID); err == nil {
			run = got
		}
	}
}

func holdState(r api.Run) string {
	if len(r.Tasks) == 1 {
		return r.Tasks[0].State
	}
	return r.State
}

// Hold is a qdisc change an agent held for a phase.
type Hold struct {
	Change string `json:"change"`
	Agent  string `json:"agent"`
	Node   string `json:"node"`
	RunID  string `json:"run_id"`
}

// Holds returns the holds the environment made, in order.
func (e *Env) Holds() []Hold {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Hold(nil), e.holds...)
}
