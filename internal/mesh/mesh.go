// Package mesh keeps a cheap round-trip mesh running among the agents:
// every Interval it creates one run in which each online agent pings a
// bounded set of peers, chosen by rendezvous hashing (as goldpinger does),
// so the load per agent stays constant however many agents there are and
// the choice only changes for the peers of agents that come or go. The
// results are ordinary task results: /metrics exports them per node pair
// and a mesh run's report shows them as a node-to-node heat map.
package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Suite is the suite name of mesh runs.
const Suite = "mesh"

// API is the part of the server's API the scheduler uses; *client.Client
// implements it.
type API interface {
	Agents(ctx context.Context, all bool) ([]api.Agent, error)
	CreateRun(ctx context.Context, rc api.RunCreate) (api.Run, error)
	GetRun(ctx context.Context, id string) (api.Run, error)
}

// Options tune the mesh.
type Options struct {
	Interval time.Duration // between rounds (default 60 s, at least 5 s)
	Peers    int           // peers each agent probes (default 3)
	Count    int           // echoes per ping or test packets per stamp (default 5)
	// Probe is the round-trip probe: "ping" (default, ICMP echo) or
	// "stamp" (STAMP to each peer's responder port: the round trip plus
	// one-way delay, loss and the DSCP that arrived, per direction).
	Probe string
	Log   *slog.Logger
	// Leading, when set, is asked before each round: with server replicas
	// only the one that leads (holds the reaper's lease) starts rounds,
	// so the cluster runs one mesh, not one per replica.
	Leading func() bool
}

func (o *Options) defaults() error {
	if o.Interval == 0 {
		o.Interval = time.Minute
	}
	if o.Peers == 0 {
		o.Peers = 3
	}
	if o.Count == 0 {
		o.Count = 5
	}
	if o.Probe == "" {
		o.Probe = probe.KindPing
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if o.Interval < 5*time.Second {
		errs = append(errs, fmt.Errorf("mesh interval %v: at least 5s", o.Interval))
	}
	if o.Peers < 1 || o.Peers > 100 {
		errs = append(errs, fmt.Errorf("mesh peers %d: want 1-100", o.Peers))
	}
	if o.Count < 1 || o.Count > 100 {
		errs = append(errs, fmt.Errorf("mesh count %d: want 1-100", o.Count))
	}
	if o.Probe != probe.KindPing && o.Probe != probe.KindStamp {
		errs = append(errs, fmt.Errorf("mesh probe %q: want ping or stamp", o.Probe))
	}
	return errors.Join(errs...)
}

// score ranks a peer for a source: the highest scores win (rendezvous
// hashing).
func score(src, peer string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(src))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(peer))
	return h.Sum64()
}

// Peers chooses up to k peers for each online agent among the online
// agents of other nodes (agents on the same node when there is no other
// node), by rendezvous hashing. The map is keyed by pod uid.
func Peers(agents []api.Agent, k int) map[string][]api.Agent {
	var online []api.Agent
	nodes := map[string]bool{}
	for _, a := range agents {
		if a.Status != "offline" {
			online = append(online, a)
			nodes[a.NodeName] = true
		}
	}
	out := map[string][]api.Agent{}
	type cand struct {
		score uint64
		a     api.Agent
	}
	for _, src := range online {
		// Keep the k highest scores (ties by uid), without sorting all.
		top := make([]cand, 0, k+1)
		for _, p := range online {
			if p.PodUID == src.PodUID || len(nodes) > 1 && p.NodeName == src.NodeName {
				continue
			}
			c := cand{score(src.PodUID, p.PodUID), p}
			i := len(top)
			for i > 0 && (top[i-1].score < c.score || top[i-1].score == c.score && top[i-1].a.PodUID > c.a.PodUID) {
				i--
			}
			if i >= k {
				continue
			}
			top = append(top, cand{})
			copy(top[i+1:], top[i:])
			top[i] = c
			if len(top) > k {
				top = top[:k]
			}
		}
		if len(top) == 0 {
			continue
		}
		ps := make([]api.Agent, len(top))
		for i, c := range top {
			ps[i] = c.a
		}
		out[src.PodUID] = ps
	}
	return out
}

// Plan returns one round's steps: a ping (or a STAMP test) from each online
// agent to each of its peers, none exclusive (they do not disturb each
// other), named by path kind like the suites' connections.
func Plan(agents []api.Agent, o Options) ([]suite.Step, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	peers := Peers(agents, o.Peers)
	byUID := map[string]api.Agent{}
	for _, a := range agents {
		byUID[a.PodUID] = a
	}
	srcs := make([]string, 0, len(peers))
	for s := range peers {
		srcs = append(srcs, s)
	}
	sort.Strings(srcs)
	var steps []suite.Step
	for _, s := range srcs {
		src := endpoint(byUID[s])
		for _, p := range peers[s] {
			dst := endpoint(p)
			spec := probe.Spec{Kind: probe.KindPing, Target: dst.IP, Count: o.Count, Interval: probe.Duration(20 * time.Millisecond),
				Timeout: probe.Duration(time.Second)}
			measure := suite.MeasurePing
			if o.Probe == probe.KindStamp {
				if dst.ResponderAddr == "" {
					continue // no responder to reflect
				}
				spec.Kind, spec.Target, measure = probe.KindStamp, dst.ResponderAddr, probe.KindStamp
			}
			steps = append(steps, suite.Step{Connection: pathOf(src, dst), Measure: measure, Src: src, Dst: dst, Spec: spec})
		}
	}
	return steps, nil
}

func endpoint(a api.Agent) suite.Endpoint {
	return suite.Endpoint{ID: a.PodUID, Name: a.PodName, Node: a.NodeName, IP: a.PodIP, ResponderAddr: a.ResponderAddr, HostNetwork: a.HostNetwork}
}

func pathOf(src, dst suite.Endpoint) string {
	switch {
	case src.HostNetwork && dst.HostNetwork:
		return suite.NodeNode
	case src.HostNetwork != dst.HostNetwork:
		return "node-pod"
	case src.Node == dst.Node:
		return suite.PodPodSameNode
	}
	return suite.PodPodCrossNode
}

// Validate checks the options as New would.
func (o Options) Validate() error { return o.defaults() }

// Scheduler runs rounds until its context ends.
type Scheduler struct {
	api  API
	opts Options
	last string // the previous round's run id
}

// New checks the options and returns a scheduler.
func New(a API, o Options) (*Scheduler, error) {
	if a == nil {
		return nil, errors.New("mesh: no API")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return &Scheduler{api: a, opts: o}, nil
}

// Run starts a round every interval until ctx ends. A round is skipped
// while the previous one is still running, so slow agents never pile up
// rounds. Errors are logged and the next round tried.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if s.opts.Leading != nil && !s.opts.Leading() {
			// Another replica runs the mesh.
		} else if _, err := s.Round(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Warn("mesh round", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ErrBusy says the previous round has not finished.
var ErrBusy = errors.New("the previous mesh round is still running")

// Round creates one round's run and returns its id ("" when there are
// fewer than two online agents).
func (s *Scheduler) Round(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.last != "" {
		run, err := s.api.GetRun(ctx, s.last)
		if err == nil && run.State == api.RunRunning {
			return "", fmt.Errorf("%w (run %s)", ErrBusy, s.last)
		}
	}
	agents, err := s.api.Agents(ctx, false)
	if err != nil {
		return "", fmt.Errorf("list agents: %w", err)
	}
	steps, err := Plan(agents, s.opts)
	if err != nil {
		return "", err
	}
	if len(steps) == 0 {
		return "", nil
	}
	tasks := make([]api.RunTask, len(steps))
	for i, st := range steps {
		tasks[i] = st.Task()
		tasks[i].Timeout = probe.Duration(30 * time.Second)
	}
	// The params make a round readable as a suite run: its report pairs
	// results with nodes (the heat map) like any suite's.
	params, err := json.Marshal(suite.RunParams{APIVersion: suite.ParamsAPIVersion, Suite: Suite, Phase: s.opts.Probe + " mesh", Phases: 1,
		Options: suite.Options{Time: s.opts.Interval, Repeat: 1}, Steps: steps})
	if err != nil {
		return "", fmt.Errorf("mesh params: %w", err)
	}
	run, err := s.api.CreateRun(ctx, api.RunCreate{Suite: Suite, AllowConcurrency: true, Params: params, Tasks: tasks})
	if err != nil {
		return "", fmt.Errorf("create mesh run: %w", err)
	}
	s.last = run.ID
	s.opts.Log.Info("mesh round", "run_id", run.ID, "tasks", len(tasks))
	return run.ID, nil
}
