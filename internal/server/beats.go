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
	bootID string    // the agent process's boot ID, "" when not known
	prev   time.Time // the heartbeat before last
	// session: the latest sign of life came from an open session (its
	// keep-alive, or the flusher's touch of open sessions), not from a
	// REST heartbeat; such an agent's stored time may lag longer
	// (sessionPersistEvery).
	session bool
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
	b.prev, b.last = b.last, now
	b.status = a.Status
	b.dirty = true
	b.session = false
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
		nb.bootID, nb.prev = old.bootID, old.last
	}
	c.m[a.PodUID] = nb
}

// dirtyAgents returns the heartbeats that must be written now, each
// stamped with its own time rounded down to the second (never fresher than
// it was; touches sharing a second share a statement), and clears their
// flag. An agent is written when its status changed, or when its stored
// time is minAge (sessionMinAge for an agent whose latest sign came from
// an open session) or more behind its latest heartbeat: the store's times
// lag reality by at most that age plus a flush period and a second, less
// than the offline threshold, so the reaper (which flushes first) never
// sees a beating agent as silent, while the store writes each agent every
// few seconds instead of every second.
func (c *beatCache) dirtyAgents(minAge, sessionMinAge time.Duration) []store.Touch {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Touch
	for uid, b := range c.m {
		if !b.dirty || !b.online {
			continue
		}
		age := minAge
		if b.session {
			age = sessionMinAge
		}
		if b.status == b.agent.Status && b.last.Sub(b.agent.LastHeartbeat) < age {
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
func (s *Server) persistEvery() time.Duration {
	return min(3*time.Second, s.opts.OfflineAfter/3)
}

// sessionPersistEvery is the same for an agent held on a session here,
// on a server without replicas: half the offline threshold, at most 5 s.
// Its latest sign of life is refreshed at every flush (the open session is
// presence, whatever its keep-alives' timing), and the only reaper that
// reads the stored times is this server's, which refreshes and flushes
// before it looks; so the longer lag (at most 5 s + a flush period + a
// second's rounding = 7 s) is never seen as silence. With replicas (a
// Bus), a leader on another replica sees these agents only through
// their stored times, under load late by whatever the flushes are late
// (50,000 agents on four replicas lost 20,000 to false offline marks at
// an 8 s lag): there it stays persistEvery.
func (s *Server) sessionPersistEvery() time.Duration {
	if s.opts.Bus != nil {
		return s.persistEvery()
	}
	return min(5*time.Second, s.opts.OfflineAfter/2)
}

// flushBeats writes the heartbeat times that lag too far (see
// dirtyAgents) to the store in one transaction. An agent holding a session
// here is stamped now first: an open session is presence (the server ends
// one silent for sessionSilence). Every replica does this on its own
// flushes, not only the leader before it reaps: the leader sees the
// agents held by other replicas only through their stored times, which
// would otherwise lag by a keep-alive period plus persistEvery plus a
// flush period before any delay of a loaded machine
// (docs/control-plane.md, "Scale").
func (s *Server) flushBeats(ctx context.Context) error {
	s.sessions.touch(s.beats, s.now())
	return s.flush(ctx, s.persistEvery(), s.sessionPersistEvery())
}

// flushAll writes every unwritten heartbeat (at shutdown).
func (s *Server) flushAll(ctx context.Context) error { return s.flush(ctx, 0, 0) }

func (s *Server) flush(ctx context.Context, minAge, sessionMinAge time.Duration) error {
	ts := s.beats.dirtyAgents(minAge, sessionMinAge)
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
// in memory, as a heartbeat that changed nothing. ok is false when the
// agent is not held online (the reaper marked it offline): the session
// then registers it again with its last heartbeat.
func (c *beatCache) alive(uid string, now time.Time) (ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[uid]
	if b == nil || !b.online {
		return false
	}
	b.prev, b.last = b.last, now
	b.dirty = true
	b.session = true
	return true
}

// aliveAll is alive for many agents under one lock (the open sessions,
// at every flush and reap).
func (c *beatCache) aliveAll(uids []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, uid := range uids {
		if b := c.m[uid]; b != nil && b.online {
			b.prev, b.last = b.last, now
			b.dirty = true
			b.session = true
		}
	}
}
