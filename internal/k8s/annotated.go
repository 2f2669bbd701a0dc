package k8s

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// applyAnnotated makes a suite.CapPodAnnotate change: a fresh agent pod
// with the change's annotations on the named pod's node, standing in for
// it in the phase's steps (Rewrite), as the CNI reads the annotations
// when the pod starts. What the CNI put on the pod's interfaces is read
// back (Shaped, and the steps' Applied names who made a limit). The undo
// deletes the pod; a failure after the pod started deletes it too.
func (e *Env) applyAnnotated(ctx context.Context, c suite.Change) (func(context.Context) error, error) {
	if len(c.PodAnnotations) == 0 {
		return nil, fmt.Errorf("change %s: no annotations", c)
	}
	timeout := e.waitTimeout()
	_, member, err := e.member(ctx, c.Member, "stand in for")
	if err != nil {
		return nil, err
	}
	si, err := e.startStandIn(ctx, member.UID, ShapedOptions{Node: member.Node, Annotations: c.PodAnnotations, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.standIns == nil {
		e.standIns = map[string]suite.Endpoint{}
	}
	e.standIns[member.UID] = si.ep
	e.standIn(member.IP, si.ep.IP)
	e.applied = &suite.Applied{By: limitMaker(si.links)}
	e.shaped = append(e.shaped, Shaped{Pod: si.agent.Pod.Name, Node: si.agent.Node, Links: si.links, Set: maps.Clone(c.PodAnnotations)})
	e.mu.Unlock()
	return si.undo, nil
}

// limitMaker names what made a rate limit on a pod's interfaces (see
// shaperOf), or "" when the CNI made none there.
func limitMaker(links []LinkTC) string {
	for _, l := range links {
		if slices.ContainsFunc(l.Qdiscs, func(q Qdisc) bool { return q.Kind == "tbf" }) || strings.HasPrefix(l.Name, "bw") {
			return shaperOf(links)
		}
	}
	return ""
}
