package k8s

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// LiveAPI is the server's API as a suite on Kubernetes sees it: only the
// agents whose pods run now (a deleted pod's agent stays listed on the
// server until its heartbeats are missed) and, when Only is set, only
// those pods.
type LiveAPI struct {
	suite.API
	Live map[string]bool // pod uids running now
	Only map[string]bool // when non-nil, the only pod uids a suite may use
}

// Agents implements suite.API.
func (l LiveAPI) Agents(ctx context.Context, all bool) ([]api.Agent, error) {
	as, err := l.API.Agents(ctx, all)
	if err != nil {
		return nil, err
	}
	var out []api.Agent
	for _, a := range as {
		if !l.Live[a.PodUID] || (l.Only != nil && !l.Only[a.PodUID]) {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// Live returns the uids of running agent pods.
func (c *Client) Live(ctx context.Context) (map[string]bool, error) {
	as, err := c.Agents(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range as {
		out[a.UID] = true
	}
	return out, nil
}

// CNIShaping is the shaping suite on a real cluster: the limits are the
// ones the CNI bandwidth plugin set from the shaped pod's annotations, so
// the phases change nothing on the network themselves.
type CNIShaping struct{ shaping.Suite }

// Plan implements suite.Suite.
func (s CNIShaping) Plan(agents []suite.Endpoint, o suite.Options, _ suite.Network) ([]suite.Phase, error) {
	phases, err := s.Suite.Plan(agents, o, noNetwork{})
	if err != nil {
		return nil, err
	}
	for i := range phases {
		phases[i].Setup, phases[i].Teardown = nil, nil
	}
	return phases, nil
}

// noNetwork satisfies the suite's need for a Network; the CNI already
// shaped the pod, so no phase asks it for a link.
type noNetwork struct{}

func (noNetwork) Link(role, member string) (string, string, error) {
	return "", "", fmt.Errorf("on Kubernetes the CNI shapes pods; no %s link of %s to change", role, member)
}

// Shaping is a shaped agent ready for the shaping suite, its peer and the
// qdiscs the CNI installed for it.
type Shaping struct {
	Agent   ShapedAgent
	PeerUID string
	Peer    string
	Links   []LinkTC
}

// ShapingOptions say how to shape.
type ShapingOptions struct {
	Ingress, Egress string // annotations (Kubernetes quantities)
	CNIConfDir      string
	Timeout         time.Duration
}

// PrepareShaping starts an agent pod with the bandwidth annotations on the
// second node (by name; the first when there is one), waits until it has
// registered with the server, and reads back the qdiscs the CNI put on its
// host-side veth. The peer is an agent pod on the first node. The caller
// deletes the shaped pod (DeletePod) when done, also on error after this
// returns.
func (c *Client) PrepareShaping(ctx context.Context, server suite.API, o ShapingOptions) (Shaping, error) {
	var sh Shaping
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	for _, q := range []string{o.Ingress, o.Egress} {
		if q != "" {
			if _, err := qosspec.ParseBandwidth(q); err != nil {
				return sh, fmt.Errorf("bandwidth: %w", err)
			}
		}
	}
	agents, err := c.Agents(ctx)
	if err != nil {
		return sh, err
	}
	byNode := map[string][]Agent{}
	for _, a := range agents {
		if !a.HostNetwork && a.Ready && a.Component != "shaped" {
			byNode[a.Node] = append(byNode[a.Node], a)
		}
	}
	var nodes []string
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	if len(nodes) == 0 {
		return sh, errors.New("no ready agent pod to pair the shaped pod with: is cnperf deployed and ready?")
	}
	peer := byNode[nodes[0]][0]
	target := nodes[len(nodes)-1]
	sa, err := c.StartShapedAgent(ctx, ShapedOptions{Node: target, Ingress: o.Ingress, Egress: o.Egress, Timeout: o.Timeout})
	if err != nil {
		return sh, err
	}
	sh.Agent, sh.Peer, sh.PeerUID = sa, peer.Name, peer.UID
	uid := string(sa.Pod.UID)
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for {
		as, err := server.Agents(wctx, false)
		if err == nil && registered(as, uid) {
			break
		}
		select {
		case <-wctx.Done():
			return sh, fmt.Errorf("shaped agent %s did not register with the server within %v (last error: %v)", sa.Pod.Name, o.Timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	sh.Links, err = c.ShapingQdiscs(ctx, sa, o.CNIConfDir, o.Timeout)
	if err != nil {
		return sh, err
	}
	return sh, nil
}

func registered(as []api.Agent, uid string) bool {
	for _, a := range as {
		if a.PodUID == uid && a.Status != "offline" {
			return true
		}
	}
	return false
}

// ShaperRates returns the tbf rates found, by link, in bits per second.
func ShaperRates(links []LinkTC) map[string]uint64 {
	out := map[string]uint64{}
	for _, l := range links {
		for _, q := range l.Qdiscs {
			if q.Kind == "tbf" && q.RateBps > 0 {
				out[l.Name] = q.RateBps
			}
		}
	}
	return out
}

// DescribeQdiscs sums up the qdiscs found, one link per line, as tc would.
func DescribeQdiscs(links []LinkTC) []string {
	var out []string
	for _, l := range links {
		s := l.Name + " (" + l.Type + ", mtu " + strconv.Itoa(l.MTU) + "):"
		for _, q := range l.Qdiscs {
			s += " " + q.String() + ";"
		}
		if l.RedirectTo != "" {
			s += " ingress filter redirects to " + l.RedirectTo + ";"
		}
		out = append(out, s)
	}
	return out
}

// DrainSuite empties the token bucket the CNI bandwidth plugin set up
// before the shaping flows run. containerd hands the plugin a burst of
// 2^32-1 bits, so a fresh bucket lets hundreds of megabytes through at line
// rate: a short flow at, or a little above, the limit would never meet the
// shaper. One unthrottled TCP flow through the shaped direction for Time
// drains it; its row (receiver rate per 100 ms) shows what the burst let
// through.
type DrainSuite struct {
	Shaped, Peer string // pod uids
	Ingress      bool   // the limit is on the shaped pod's ingress: send to it
}

// Name implements suite.Suite.
func (DrainSuite) Name() string { return "shaping-drain" }

// Describe implements suite.Suite.
func (DrainSuite) Describe() string {
	return "one unthrottled TCP flow through a CNI-shaped pod, emptying its token bucket"
}

// Plan implements suite.Suite.
func (d DrainSuite) Plan(agents []suite.Endpoint, o suite.Options, _ suite.Network) ([]suite.Phase, error) {
	var shaped, peer *suite.Endpoint
	for i := range agents {
		switch agents[i].ID {
		case d.Shaped:
			shaped = &agents[i]
		case d.Peer:
			peer = &agents[i]
		}
	}
	if shaped == nil || peer == nil {
		return nil, fmt.Errorf("burst drain: the shaped pod or its peer is not among the server's online agents")
	}
	src, dst := *shaped, *peer
	if d.Ingress {
		src, dst = dst, src
	}
	spec := probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr, Duration: probe.Duration(o.Time),
		Interval: probe.Duration(shaping.Interval), Timeout: probe.Duration(10 * time.Second)}
	return []suite.Phase{{Name: "drain the CNI's token bucket", Steps: []suite.Step{{
		Connection: "burst drain " + src.Name + " -> " + dst.Name, Measure: suite.MeasureTCP,
		Src: src, Dst: dst, Spec: spec, Exclusive: true}}}}, nil
}

// Rows implements suite.Suite.
func (DrainSuite) Rows(outcomes []suite.Outcome) []suite.Row { return suite.Rows(outcomes) }
