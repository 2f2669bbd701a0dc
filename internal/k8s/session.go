package k8s

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/suite"
)

// OpenOptions say how to open a session on a cluster where cnperf is
// deployed.
type OpenOptions struct {
	// CNIConfDir is the nodes' CNI configuration directory (for the facts).
	CNIConfDir string
	// AllowNodeQdisc is the Env's (suite.CapNodeQdisc).
	AllowNodeQdisc bool
	// MayUse are the capabilities the suite may ask for; those only a
	// node's kernel can tell (the police action) are looked for first.
	MayUse []suite.Cap
	// Token is the server's user token; empty: read from the token Secret.
	Token string
	// Notes gets what the session waits for (cnperf not ready yet, agents
	// not online); nil discards it.
	Notes io.Writer
}

// A Session is a cluster ready for a suite: the API client, the cluster's
// facts, the server reached by port-forward and the Env a suite.Runner
// runs in. Close ends the port-forward.
type Session struct {
	Client *Client
	Facts  Facts
	Env    *Env
	// API is the server's API, showing only agents whose pods run now.
	API LiveAPI
	fw  *Forward
}

// Close ends the session's port-forward.
func (s *Session) Close() error { return s.fw.Close() }

// readyWithin bounds the wait for a deployed cnperf to become ready (its
// server and every agent DaemonSet) before a suite runs on it.
const readyWithin = 2 * time.Minute

// agentsOnlineWithin bounds the wait for the agents of running pods to be
// online at the server before a suite is planned.
const agentsOnlineWithin = 30 * time.Second

// Open opens a session on the cluster c reaches: it waits a bounded time
// for a deployed cnperf that is still rolling out, records the cluster's
// facts and which agent sets are deployed, port-forwards to the server,
// reads the user token when none is given, and waits a bounded time for
// the agents of running pods to be online. The Env's path (pod MTU,
// encapsulation) comes from the facts.
func Open(ctx context.Context, c *Client, o OpenOptions) (*Session, error) {
	notes := o.Notes
	if notes == nil {
		notes = io.Discard
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	if !st.Ready() {
		// Deployed but still rolling out (a fresh install, or `helm
		// install --wait`, which counts a DaemonSet done with one pod
		// short under its default maxUnavailable): wait a bounded time,
		// as `kubectl rollout status` would, instead of refusing.
		if !st.Deployed {
			return nil, fmt.Errorf("cnperf on the cluster is not ready: %s (cnperf k8s status)", st.NotReady())
		}
		fmt.Fprintf(notes, "cnperf on the cluster is not ready yet (%s); waiting up to %v\n", st.NotReady(), readyWithin)
		if err := c.WaitReady(ctx, readyWithin); err != nil {
			return nil, fmt.Errorf("cnperf on the cluster is not ready: %w (cnperf k8s status)", err)
		}
	}
	sets, err := c.AgentSets(ctx)
	if err != nil {
		return nil, err
	}
	env := &Env{Client: c, CNIConfDir: o.CNIConfDir, AllowNodeQdisc: o.AllowNodeQdisc, Sets: sets}
	// The facts and the look at the nodes' kernels run side by side.
	factsc := make(chan error, 1)
	var facts Facts
	go func() {
		var err error
		facts, err = c.Facts(ctx, o.CNIConfDir, 2*time.Minute)
		factsc <- err
	}()
	var perr error
	if len(o.MayUse) > 0 {
		perr = env.Probe(ctx, o.MayUse...)
	}
	if err := <-factsc; err != nil {
		return nil, fmt.Errorf("cluster facts: %w", err)
	}
	if perr != nil {
		return nil, perr
	}
	env.PathMTU, env.Encap, env.MetadataTunnels = facts.PodMTU, facts.Encap(), facts.MetadataTunnels
	env.CNI = CNI{Name: facts.CNIName, Version: facts.CNIVersion, Mode: facts.Backend, From: facts.CNIFrom}
	fw, err := c.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		return nil, err
	}
	s := &Session{Client: c, Facts: facts, Env: env, fw: fw}
	if err := s.connect(ctx, o.Token, notes); err != nil {
		fw.Close()
		return nil, err
	}
	return s, nil
}

// connect makes the server's client and waits for the agents.
func (s *Session) connect(ctx context.Context, token string, notes io.Writer) error {
	c := s.Client
	if token == "" {
		var err error
		if token, _, err = c.Tokens(ctx); err != nil {
			return fmt.Errorf("no --token and %w", err)
		}
	}
	cl, err := client.New(s.fw.URL, token, s.fw.ClientOptions()...)
	if err != nil {
		return err
	}
	live, err := c.Live(ctx)
	if err != nil {
		return err
	}
	s.Env.Server = cl
	s.API = LiveAPI{ServerAPI: cl, Live: live}
	missing, err := s.API.WaitOnline(ctx, agentsOnlineWithin, 500*time.Millisecond)
	if err != nil {
		return fmt.Errorf("list the server's agents: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	// Agents still missing are named and left out of the plan: a Ready
	// pod's agent can be in its reconnect back-off.
	names := map[string]string{}
	if as, err := c.Agents(ctx); err == nil {
		for _, a := range as {
			names[a.UID] = a.Name + "@" + a.Node
		}
	}
	for i, uid := range missing {
		if n := names[uid]; n != "" {
			missing[i] = n
		}
	}
	fmt.Fprintf(notes, "warning: the agents of %d running pod(s) are not online at the server after %v: %s; the suite runs without them (cnperf k8s status; kubectl logs)\n",
		len(missing), agentsOnlineWithin, strings.Join(missing, ", "))
	return nil
}

// Encap is how the cluster's CNI encapsulates traffic between nodes, as
// suite.Caps.Encap says it.
func (f Facts) Encap() string {
	if f.Backend == "vxlan" {
		return suite.EncapVXLAN
	}
	return suite.EncapNone
}

// LabelRows names the cluster's CNI, its release and its backend in
// every row (`cni`, `cni_version`, `backend`), so rows of runs on
// different CNIs or backends stay apart.
func (f Facts) LabelRows(rows []suite.Row) {
	for i := range rows {
		if f.CNIName != "" {
			if rows[i].Labels == nil {
				rows[i].Labels = map[string]string{}
			}
			rows[i].Labels["cni"] = f.CNIName
			if f.CNIVersion != "" {
				rows[i].Labels["cni_version"] = f.CNIVersion
			}
		}
		if f.Backend != "" {
			rows[i].Backend = f.Backend
		}
	}
}
