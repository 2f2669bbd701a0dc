package server

import (
	"context"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// beatCache keeps each online agent's latest heartbeat in memory.
type beatCache struct {
	mu sync.Mutex // guards m
	m  map[string]*beat
}

type beat struct {
	agent  store.Agent // as last written to the store (identity fields)
	status store.AgentStatus
	last   time.Time // latest heartbeat
	dirty  bool      // last/status not yet flushed
	online bool      // false after the reaper marked the agent offline
}

func newBeatCache() *beatCache { return &beatCache{m: map[string]*beat{}} }

// sameIdentity reports whether a heartbeat carries the identity already
// stored (status and time aside).
func sameIdentity(a, b store.Agent) bool {
	return a.PodUID == b.PodUID && a.PodName == b.PodName && a.PodNamespace == b.PodNamespace &&
		a.PodIP == b.PodIP && a.NodeName == b.NodeName && a.NodeIP == b.NodeIP &&
		a.HostNetwork == b.HostNetwork && a.ResponderAddr == b.ResponderAddr && a.Version == b.Version
}

// touch records a heartbeat in memory when the agent is known, online and
// unchanged, and returns its ID; ok is false when the store must be written.
func (c *beatCache) touch(a store.Agent, now time.Time) (id int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[a.PodUID]
	if b == nil || !b.online || !sameIdentity(b.agent, a) {
		return 0, false
	}
	b.last = now
	b.status = a.Status
	b.dirty = true
	return b.agent.ID, true
}

// stored records an agent just written to the store.
func (c *beatCache) stored(a store.Agent, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[a.PodUID] = &beat{agent: a, status: a.Status, last: now, online: true}
}

// dirtyAgents returns the agents with unflushed heartbeats and clears their
// flag, plus the oldest of their heartbeat times.
func (c *beatCache) dirtyAgents() ([]store.Agent, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Agent
	var oldest time.Time
	for _, b := range c.m {
		if !b.dirty || !b.online {
			continue
		}
		a := b.agent
		a.Status = b.status
		a.LastHeartbeat = b.last
		out = append(out, a)
		if oldest.IsZero() || b.last.Before(oldest) {
			oldest = b.last
		}
		b.dirty = false
	}
	return out, oldest
}

// redirty marks agents dirty again after a failed flush.
func (c *beatCache) redirty(as []store.Agent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range as {
		if b := c.m[a.PodUID]; b != nil {
			b.dirty = true
		}
	}
}

// offline forgets that the agent is online, so its next heartbeat is written
// to the store at once.
func (c *beatCache) offline(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.m[uid]; b != nil {
		b.online = false
	}
}

// flushBeats writes the in-memory heartbeat times to the store in one
// transaction. The store stamps one time for the batch: the oldest
// heartbeat in it, so an agent never looks fresher than it is.
func (s *Server) flushBeats(ctx context.Context) error {
	as, oldest := s.beats.dirtyAgents()
	if len(as) == 0 {
		return nil
	}
	if err := s.st.UpsertHeartbeats(ctx, as, oldest); err != nil {
		s.beats.redirty(as)
		return err
	}
	return nil
}
