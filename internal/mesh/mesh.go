// Package mesh keeps a cheap round-trip mesh running among the agents:
// every Interval it creates one run in which each online agent pings the
// peers its pair plan (package pairplan, as the matrix's) gives the
// round: all of them; k a round, rotating so that every pair is pinged
// within ceil((n-1)/k) rounds while the load per agent stays constant
// however many agents there are; or all inside a zone and rotating
// representatives across zones. The results are ordinary task results:
// /metrics exports them per node pair and a mesh run's report shows them
// as a node-to-node heat map.
package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/pairplan"
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
	// Plan is the pair plan: pairplan.PlanSample (default), PlanAll or
	// PlanZones; Peers is k of the sample plan (default 3); ZoneLabel
	// the node label the zones plan groups agents by (their node's, as
	// the agents report it).
	Plan      string
	Peers     int
	ZoneLabel string
	Count     int // echoes per ping or test packets per stamp (default 5)
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
	if o.Plan == "" {
		o.Plan = pairplan.PlanSample
	}
	if o.Peers == 0 {
		o.Peers = 3
	}
	if o.ZoneLabel == "" {
		o.ZoneLabel = pairplan.DefaultZoneLabel
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
	if !pairplan.Known(o.Plan) {
		errs = append(errs, fmt.Errorf("mesh plan %q: want all, sample or zones", o.Plan))
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

// online are the agents not offline, and the number of their nodes.
func online(agents []api.Agent) ([]api.Agent, int) {
	var out []api.Agent
	nodes := map[string]bool{}
	for _, a := range agents {
		if a.Status != "offline" {
			out = append(out, a)
			nodes[a.NodeName] = true
		}
	}
	return out, len(nodes)
}

// zones groups the agents by their node's label, or names the nodes
// without it.
func zones(as []api.Agent, label string) ([][]int, error) {
	names, zone := make([]string, len(as)), make([]string, len(as))
	var lacking []string
	for i, a := range as {
		names[i], zone[i] = a.PodUID, a.NodeLabels[label]
		if zone[i] == "" && !slices.Contains(lacking, a.NodeName) {
			lacking = append(lacking, a.NodeName)
		}
	}
	if len(lacking) > 0 {
		if len(lacking) > 5 {
			lacking = append(lacking[:5], fmt.Sprintf("and %d more", len(lacking)-5))
		}
		return nil, fmt.Errorf("mesh plan zones: no label %s reported for node %s (--mesh-zone-label names another)", label, strings.Join(lacking, ", "))
	}
	return pairplan.Zones(names, zone), nil
}

// Peers are the peers each online agent pings in round cycle of the
// plan, keyed by pod uid: the plan's pairs over the online agents, less
// those of two agents on one node when there are several nodes.
func Peers(agents []api.Agent, o Options, cycle int) (map[string][]api.Agent, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	as, nodes := online(agents)
	var pairs [][2]int
	switch o.Plan {
	case pairplan.PlanAll:
		for i := range as {
			for j := range as {
				if i != j {
					pairs = append(pairs, [2]int{i, j})
				}
			}
		}
	case pairplan.PlanSample:
		names := make([]string, len(as))
		for i, a := range as {
			names[i] = a.PodUID
		}
		pairs = pairplan.SamplePairs(pairplan.Ring(names), o.Peers, cycle)
	case pairplan.PlanZones:
		z, err := zones(as, o.ZoneLabel)
		if err != nil {
			return nil, err
		}
		pairs = pairplan.ZonePairs(z, cycle)
	}
	out := map[string][]api.Agent{}
	for _, p := range pairs {
		src, dst := as[p[0]], as[p[1]]
		if nodes > 1 && src.NodeName == dst.NodeName {
			continue
		}
		out[src.PodUID] = append(out[src.PodUID], dst)
	}
	return out, nil
}

// Statement says what the plan does over the agents: pairs a round and
// the rounds within which every pair is pinged.
func Statement(agents []api.Agent, o Options) string {
	if err := o.defaults(); err != nil {
		return err.Error()
	}
	as, _ := online(agents)
	n := len(as)
	switch o.Plan {
	case pairplan.PlanSample:
		w := pairplan.Window(n, o.Peers)
		return fmt.Sprintf("mesh plan sample: %d agents, %d peers each a round; every pair within %d rounds (%v)", n, min(o.Peers, max(n-1, 0)), w, time.Duration(w)*o.Interval)
	case pairplan.PlanZones:
		z, err := zones(as, o.ZoneLabel)
		if err != nil {
			return err.Error()
		}
		w := pairplan.ZoneWindow(z)
		return fmt.Sprintf("mesh plan zones: %d agents in %d zones by %s; all pairs inside a zone each round, representatives across; every agent represents its zone within %d rounds (%v)", n, len(z), o.ZoneLabel, w, time.Duration(w)*o.Interval)
	}
	return fmt.Sprintf("mesh plan all: %d agents, every pair each round", n)
}

// Plan returns round cycle's steps: a ping (or a STAMP test) from each online
// agent to each of its peers, none exclusive (they do not disturb each
// other), named by path kind like the suites' connections.
func Plan(agents []api.Agent, o Options, cycle int) ([]suite.Step, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	peers, err := Peers(agents, o, cycle)
	if err != nil {
		return nil, err
	}
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
	api   API
	opts  Options
	last  string // the previous round's run id
	cycle int    // the next round's cycle of the plan
	said  string // the plan's statement as last logged
}

// New checks the options and returns a scheduler.
func New(a API, o Options) (*Scheduler, error) {
	if a == nil {
		return nil, errors.New("mesh: no API")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	// Cycles count from the clock's rounds, so a replica that takes over
	// goes on about where the last left off rather than at 0.
	return &Scheduler{api: a, opts: o, cycle: int(time.Now().Unix() / int64(max(o.Interval/time.Second, 1)))}, nil
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
	if st := Statement(agents, s.opts); st != s.said {
		s.said = st
		s.opts.Log.Info(st)
	}
	steps, err := Plan(agents, s.opts, s.cycle)
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
	s.opts.Log.Info("mesh round", "run_id", run.ID, "cycle", s.cycle, "tasks", len(tasks))
	s.cycle++
	return run.ID, nil
}
