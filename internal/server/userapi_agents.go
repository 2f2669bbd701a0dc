package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// The user API's agent endpoints, and the index that resolves the agents a
// created task names.

func wantAll(r *http.Request) bool {
	switch strings.ToLower(r.URL.Query().Get("all")) {
	case "1", "true", "yes":
		return true
	}
	return false
}

func (s *Server) handleClientsV1(w http.ResponseWriter, r *http.Request) {
	as, err := s.st.ListAgents(r.Context(), store.AgentFilter{IncludeOffline: wantAll(r)})
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	out := make([]api.Client, 0, len(as))
	for _, a := range as {
		out = append(out, clientV1(s.fresh(a)))
	}
	s.okV1(w, out)
}

func (s *Server) handleAgentsV2(w http.ResponseWriter, r *http.Request) {
	as, err := s.st.ListAgents(r.Context(), store.AgentFilter{IncludeOffline: wantAll(r), Node: r.URL.Query().Get("node")})
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := make([]api.Agent, 0, len(as))
	for _, a := range as {
		out = append(out, agentV2(s.fresh(a)))
	}
	writeJSON(w, http.StatusOK, out)
}

// fresh returns a with its latest heartbeat time from memory, which the
// store may lag by a few seconds.
func (s *Server) fresh(a store.Agent) store.Agent {
	if t := s.beats.lastBeat(a.PodUID); t.After(a.LastHeartbeat) {
		a.LastHeartbeat = t
	}
	return a
}

// agentIndex resolves agents by pod uid or pod name for task creation: a
// uid is looked up in the store (one indexed read, remembered for the
// request's other tasks); the list of every agent is read only when a
// reference is not a uid and names may be used. (Listing 10,000 agents
// for each task created cost the server ~10 ms of CPU and the task that
// much dispatch latency.)
type agentIndex struct {
	ctx    context.Context
	st     store.Store
	now    time.Time
	byUID  map[string]store.Agent
	byName map[string][]store.Agent // nil until a name is looked up
	// fetched holds the agents prefetch read, with their sessions'
	// replicas (store.Agent.HeldBy): what a claim at creation decides by.
	fetched map[string]store.Agent
}

func (s *Server) agentIndex(ctx context.Context) (*agentIndex, error) {
	return &agentIndex{ctx: ctx, st: s.st, now: s.now(), byUID: map[string]store.Agent{}, fetched: map[string]store.Agent{}}, nil
}

// prefetch reads the agents refs name by pod uid in one query per few
// hundred (a run's endpoints), so that resolve finds them without a
// round trip each; refs that name no agent's uid are looked up by resolve
// as before.
func (ix *agentIndex) prefetch(refs []string) error {
	var want []string
	seen := map[string]bool{}
	for _, r := range refs {
		if _, ok := ix.byUID[r]; ok || seen[r] || r == "" {
			continue
		}
		seen[r] = true
		want = append(want, r)
	}
	if len(want) == 0 {
		return nil
	}
	as, err := ix.st.GetAgents(ix.ctx, want, ix.now)
	if err != nil {
		return fmt.Errorf("look up agents: %w", err)
	}
	for _, a := range as {
		ix.byUID[a.PodUID] = a
		ix.fetched[a.PodUID] = a
	}
	return nil
}

func (ix *agentIndex) resolve(field, ref string, byName bool) (store.Agent, error) {
	if a, ok := ix.byUID[ref]; ok {
		return a, nil
	}
	a, err := ix.st.GetAgent(ix.ctx, ref)
	if err == nil {
		ix.byUID[ref] = a
		return a, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return store.Agent{}, fmt.Errorf("look up agent %s: %w", ref, err)
	}
	if byName {
		if ix.byName == nil {
			as, err := ix.st.ListAgents(ix.ctx, store.AgentFilter{IncludeOffline: true})
			if err != nil {
				return store.Agent{}, fmt.Errorf("list agents: %w", err)
			}
			ix.byName = map[string][]store.Agent{}
			for _, a := range as {
				ix.byName[a.PodName] = append(ix.byName[a.PodName], a)
			}
		}
		switch as := ix.byName[ref]; len(as) {
		case 1:
			return as[0], nil
		case 0:
		default:
			return store.Agent{}, api.BadRequest(field, "pod name %q matches %d agents: use the pod uid", ref, len(as))
		}
		return store.Agent{}, api.BadRequest(field, "no agent with pod uid or pod name %q (see GET /api/v2/agents)", ref)
	}
	return store.Agent{}, api.BadRequest(field, "no agent with pod uid %q (see GET /api/v1/external/clients)", ref)
}
