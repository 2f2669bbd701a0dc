package server

import (
	"context"
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// Presence of agents on sessions. An open session is the agent's presence;
// the store learns it once per session, not every few seconds: when a
// session opens, the next flush writes the agent's row as held by this
// replica's presence lease (a row of the leases table, "presence REPLICA",
// renewed every ReapEvery for presenceTTL); when it ends, the next flush
// releases the row, stamped with the flush's time (or, for a session the
// server ended for its silence, the time of its last frame). The reaper
// (store.MarkSilentOffline), on whichever replica leads, leaves an agent
// whose row names a live lease online, whatever its time; a released agent
// is silent from its release, as a polling agent is from its last
// heartbeat. A replica that dies stops renewing its lease, and its agents
// not held elsewhere by then (they reconnect within their back-off) go
// offline once it expired. Before, every replica rewrote every held agent's
// time every 3-6 s, ~10 % of a single server's CPU at 10,000 agents and
// half a core of PostgreSQL at 50,000 (docs/control-plane.md, "Server CPU
// per agent").

// presenceLeasePrefix starts the name of every replica's presence lease.
const presenceLeasePrefix = "presence "

// presenceLease names this replica's presence lease.
func (s *Server) presenceLease() string { return presenceLeasePrefix + s.opts.ReplicaID }

// presenceTTL is how long a presence lease lives unless renewed: the
// leader lease's TTL (15 s: five renewals may fail or come late), and at
// least two of the longest keep-alive period asked of a session and 5 s,
// so that the agents of a replica whose node died silently (they give up
// on it after two of their periods without an echo, then reconnect within
// a second or two) hold sessions elsewhere before it expires.
func (s *Server) presenceTTL() time.Duration {
	return max(s.opts.LeaseTTL, 2*s.longestKeepalive()+5*time.Second)
}

// mark records a session opened (held) or ended for the next flush; the
// later call wins. since is the agent's last sign of life when it ended
// (zero: the flush's time). ss.mu must be held.
func (ss *sessionSet) mark(uid string, held bool, since time.Time) {
	if ss.presence == nil {
		ss.presence = map[string]store.Presence{}
	}
	ss.presence[uid] = store.Presence{PodUID: uid, Held: held, At: since}
}

// hold writes a's agent as held again at the next flush, if a is still
// its open session (the agent was registered again after an offline mark).
func (ss *sessionSet) hold(a *agentSession) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m[a.uid] == a {
		ss.mark(a.uid, true, time.Time{})
	}
}

// takePresence returns the presence changes waiting to be written.
func (ss *sessionSet) takePresence() []store.Presence {
	ss.mu.Lock()
	pending := ss.presence
	ss.presence = nil
	ss.mu.Unlock()
	out := make([]store.Presence, 0, len(pending))
	for _, p := range pending {
		out = append(out, p)
	}
	return out
}

// restorePresence puts back changes whose write failed, unless a newer
// change of the same agent came meanwhile.
func (ss *sessionSet) restorePresence(ps []store.Presence) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, p := range ps {
		if _, ok := ss.presence[p.PodUID]; !ok {
			ss.mark(p.PodUID, p.Held, p.At)
		}
	}
}

// writePresence renews this replica's presence lease when due and writes
// the sessions opened and ended since the last call. The flusher and the
// reaper both call it (through flushBeats); presenceMu keeps their writes
// in order.
func (s *Server) writePresence(ctx context.Context) error {
	s.presenceMu.Lock()
	defer s.presenceMu.Unlock()
	now := s.now()
	if now.Sub(s.presenceRenewed) >= s.opts.ReapEvery || now.Before(s.presenceRenewed) {
		l, err := s.st.HoldLease(ctx, s.presenceLease(), s.opts.ReplicaID, now, s.presenceTTL())
		if err != nil {
			return fmt.Errorf("presence lease: %w", err)
		}
		if !l.Held {
			return fmt.Errorf("presence lease %s is held by %s (two replicas with one id?)", s.presenceLease(), l.Holder)
		}
		s.presenceRenewed = now
	}
	ps := s.sessions.takePresence()
	if len(ps) == 0 {
		return nil
	}
	if _, err := s.st.SetPresence(ctx, s.presenceLease(), ps, now); err != nil {
		s.sessions.restorePresence(ps)
		return fmt.Errorf("write sessions' presence: %w", err)
	}
	s.beats.setHeld(ps, now)
	return nil
}

// dropDeadPresence deletes presence leases that expired an hour ago or
// more (replicas gone for good; their agents went offline when the lease
// expired), at most once a minute; the leader's reaper calls it.
func (s *Server) dropDeadPresence(ctx context.Context, now time.Time) error {
	if now.Sub(s.presenceDropped) < time.Minute && !now.Before(s.presenceDropped) {
		return nil
	}
	s.presenceDropped = now
	if _, err := s.st.DropExpiredLeases(ctx, presenceLeasePrefix, now.Add(-time.Hour)); err != nil {
		return fmt.Errorf("drop dead presence leases: %w", err)
	}
	return nil
}
