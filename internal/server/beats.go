package server

import (
	"context"
	"maps"
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
	bootID string    // the agent process's boot ID, "" when not known
	prev   time.Time // the heartbeat before last
	// held: the store's row names this replica's presence lease (the
	// agent holds a session here, presence.go): its time is not written
	// while it is held, only a change of its status.
	held bool
}

func newBeatCache() *beatCache { return &beatCache{m: map[string]*beat{}} }

// sameIdentity reports whether a heartbeat carries the identity already
// stored (status and time aside).
func sameIdentity(a, b store.Agent) bool {
	return a.PodUID == b.PodUID && a.PodName == b.PodName && a.PodNamespace == b.PodNamespace &&
		a.PodIP == b.PodIP && a.NodeName == b.NodeName && a.NodeIP == b.NodeIP &&
		a.HostNetwork == b.HostNetwork && a.ResponderAddr == b.ResponderAddr && a.Version == b.Version &&
		maps.Equal(a.NodeLabels, b.NodeLabels)
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
	b.prev, b.last = b.last, now
	b.status = a.Status
	b.dirty = true
	return b.agent.ID, true
}

// boot records the agent's boot ID. restarted is true when a different one
// was known (the agent restarted); since is then the last heartbeat of the
// previous process.
func (c *beatCache) boot(uid, bootID string) (restarted bool, since time.Time) {
	if bootID == "" {
		return false, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[uid]
	if b == nil {
		return false, time.Time{}
	}
	old := b.bootID
	b.bootID = bootID
	if old == "" || old == bootID {
		return false, time.Time{}
	}
	return true, b.prev
}

// warm fills the cache with agents read from the store (at start), so that
// after a restart their heartbeats are touches, not a storm of writes.
func (c *beatCache) warm(as []store.Agent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range as {
		if _, ok := c.m[a.PodUID]; ok || !a.Status.Online() {
			continue
		}
		c.m[a.PodUID] = &beat{agent: a, status: a.Status, last: a.LastHeartbeat, online: true}
	}
}

// stored records an agent just written to the store.
func (c *beatCache) stored(a store.Agent, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nb := &beat{agent: a, status: a.Status, last: now, online: true}
	if old := c.m[a.PodUID]; old != nil {
		// The upsert leaves the row's presence lease as it was.
		nb.bootID, nb.prev, nb.held = old.bootID, old.last, old.held
	}
	c.m[a.PodUID] = nb
}

// dirtyAgents returns the heartbeats that must be written now, each
// stamped with its own time rounded down to the second (never fresher than
// it was; touches sharing a second share a statement), and clears their
// flag. An agent is written when its status changed, or when its stored
// time is minAge or more behind its latest heartbeat: the store's times
// lag reality by at most that age plus a flush period and a second, less
// than the offline threshold, so the reaper (which flushes first) never
// sees a beating agent as silent, while the store writes each agent every
// few seconds instead of every second. An agent held by a session here
// (its row names this replica's presence lease) is written only when its
// status changed.
func (c *beatCache) dirtyAgents(minAge time.Duration) []store.Touch {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Touch
	for uid, b := range c.m {
		if !b.dirty || !b.online {
			continue
		}
		if b.status == b.agent.Status && (b.held || b.last.Sub(b.agent.LastHeartbeat) < minAge) {
			continue
		}
		at := b.last.Truncate(time.Second)
		if at.Before(b.agent.LastHeartbeat) {
			at = b.agent.LastHeartbeat // never move a stored time back
		}
		out = append(out, store.Touch{PodUID: uid, Status: b.status, At: at})
		b.dirty = false
		// What the store holds once the write succeeds.
		b.agent.Status, b.agent.LastHeartbeat = b.status, at
	}
	return out
}

// setHeld records presence written to the store at now (SetPresence):
// held agents are no longer written for their times, released ones are
// again.
func (c *beatCache) setHeld(ps []store.Presence, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		b := c.m[p.PodUID]
		if b == nil {
			continue
		}
		b.held = p.Held
		if at := p.Time(now); at.After(b.agent.LastHeartbeat) {
			b.agent.LastHeartbeat = at
		}
	}
}

// redirty marks agents dirty again after a failed flush.
func (c *beatCache) redirty(ts []store.Touch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range ts {
		if b := c.m[t.PodUID]; b != nil {
			b.dirty = true
			b.agent.LastHeartbeat = time.Time{} // unknown: write at the next flush
		}
	}
}

// lastBeat returns the agent's latest heartbeat time known in memory (zero
// when none), fresher than the store's by up to a few seconds.
func (c *beatCache) lastBeat(uid string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.m[uid]; b != nil && b.online {
		return b.last
	}
	return time.Time{}
}

// offline forgets the agent (the reaper marked it offline and failed its
// tasks), so its next heartbeat is written to the store at once, and the
// memory of agents gone for good is freed.
func (c *beatCache) offline(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// online reports whether the agent is held as online.
func (c *beatCache) online(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[uid]
	return b != nil && b.online
}

// full reports whether uid is not held and the cache already holds max
// agents.
func (c *beatCache) full(uid string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.m[uid]
	return !held && len(c.m) >= max
}

// persistEvery is how far a polling agent's stored heartbeat time may lag
// before a flush writes it: a third of the offline threshold, at most 3 s.
// (An agent holding a session is present by its replica's presence lease
// instead: presence.go.)
func (s *Server) persistEvery() time.Duration {
	return min(3*time.Second, s.opts.OfflineAfter/3)
}

// flushBeats writes the presence of sessions opened and ended since the
// last flush (renewing this replica's presence lease) and the heartbeat
// times that lag too far (see dirtyAgents) to the store.
func (s *Server) flushBeats(ctx context.Context) error {
	if err := s.writePresence(ctx); err != nil {
		return err
	}
	return s.flush(ctx, s.persistEvery())
}

// flushAll writes every unwritten heartbeat (at shutdown).
func (s *Server) flushAll(ctx context.Context) error {
	if err := s.writePresence(ctx); err != nil {
		return err
	}
	return s.flush(ctx, 0)
}

func (s *Server) flush(ctx context.Context, minAge time.Duration) error {
	ts := s.beats.dirtyAgents(minAge)
	if len(ts) == 0 {
		return nil
	}
	if _, err := s.st.TouchAgents(ctx, ts); err != nil {
		s.beats.redirty(ts)
		return err
	}
	return nil
}

// alive records a session's keep-alive: the agent's latest sign of life,
// in memory, as a heartbeat that changed nothing (nothing to write while
// its session holds it in the store). ok is false when the agent is not
// held online (the reaper marked it offline): the session then registers
// it again with its last heartbeat.
func (c *beatCache) alive(uid string, now time.Time) (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[uid]
	if b == nil || !b.online {
		return false
	}
	b.prev, b.last = b.last, now
	if !b.held {
		b.dirty = true
	}
	return true
}
