package server

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// The keep-alive period asked of agent sessions, scaled with the sessions
// a replica holds (Options.SessionKeepalive 0, the default), as Cilium
// scales its health probes' interval with the cluster's size: each
// keep-alive costs the replica that holds the session a read, a write
// and their wake-ups (PostgreSQL sees none), so the period grows with the
// sessions held to keep a replica's keep-alives under
// SessionKeepaliveBudget a second, within [KeepaliveMin, KeepaliveMax].
// At 10 s, 100,000 agents were 10,000 keep-alives a second, more than
// two cores could answer beside the simulated agents: answers came late,
// sessions were given up and opened again, and the opens took what was
// left (bench/server/README.md).
//
// A session's period is asked in its welcome and raised (never lowered)
// while it is open by a keep-alive frame carrying keepalive_s, when the
// sessions held grow past the next step. The offline judgement follows
// the period asked of each session: its silence limit is two of its
// periods and a second, and the presence lease lives two of the longest
// period asked and 5 s, so no agent keeping its period is ended or marked
// offline for a period that grew. An agent that ignores the raise keeps
// its shorter period: more keep-alives than asked, never fewer.

const (
	// KeepaliveMin and KeepaliveMax bound the scaled period.
	KeepaliveMin = api.DefaultKeepalive
	KeepaliveMax = 60 * time.Second
	// DefaultSessionKeepaliveBudget is the most keep-alives a second a
	// replica asks for (about 4 % of a core): a replica holding up to
	// 2,000 sessions asks for 10 s, 12,000 or more for 60 s.
	DefaultSessionKeepaliveBudget = 200
)

// scaledKeepalive is the period that keeps n sessions' keep-alives under
// budget a second: n/budget seconds rounded up to a step of half of lo
// (5 s), within [lo, hi]. The steps make a growing fleet raise the open
// sessions' periods a few times, not at every session opened.
func scaledKeepalive(n int, budget float64, lo, hi time.Duration) time.Duration {
	if budget <= 0 || n <= 0 {
		return lo
	}
	p := float64(n) / budget * float64(time.Second)
	if p >= float64(hi) {
		return hi
	}
	d := time.Duration(math.Ceil(p))
	if step := lo / 2; step > 0 {
		if r := d % step; r != 0 {
			d += step - r
		}
	}
	return min(max(d, lo), hi)
}

// keepaliveFor is the period to ask of sessions when n are held: the
// fixed Options.SessionKeepalive, or the scaled one.
func (s *Server) keepaliveFor(n int) time.Duration {
	if s.opts.SessionKeepalive > 0 {
		return s.opts.SessionKeepalive
	}
	return scaledKeepalive(n, s.opts.SessionKeepaliveBudget, s.keepaliveLo, s.keepaliveHi)
}

// checkKeepalive checks the keep-alive options.
func checkKeepalive(o Options) error {
	if o.SessionKeepalive < 0 {
		return fmt.Errorf("server: session keep-alive %v: want a positive period, or 0 to scale it with the sessions held", o.SessionKeepalive)
	}
	if o.SessionKeepalive > 0 && o.SessionKeepalive < 100*time.Millisecond {
		return fmt.Errorf("server: session keep-alive %v: want at least 100ms", o.SessionKeepalive)
	}
	if o.SessionKeepaliveBudget < 0 || math.IsNaN(o.SessionKeepaliveBudget) || math.IsInf(o.SessionKeepaliveBudget, 0) {
		return fmt.Errorf("server: session keep-alive budget %v: want keep-alives a second above 0", o.SessionKeepaliveBudget)
	}
	return nil
}

// raiseMax raises m to p if p is greater.
func raiseMax(m *atomic.Int64, p time.Duration) {
	for {
		cur := m.Load()
		if int64(p) <= cur || m.CompareAndSwap(cur, int64(p)) {
			return
		}
	}
}

// longestKeepalive is the longest period asked of any session since the
// server started (at least the period asked of the next one).
func (s *Server) longestKeepalive() time.Duration {
	return max(time.Duration(s.keepaliveAsked.Load()), s.keepaliveFor(s.sessions.count()))
}

// ask records p as the period asked of a's session: its silence limit
// follows it (it is only ever raised).
func (s *Server) ask(a *agentSession, p time.Duration) {
	a.asked.Store(int64(p))
	raiseMax(&s.keepaliveAsked, p)
}

// silenceOf is how long a session may send nothing before the server ends
// it: two of the periods asked of it and a second, so one keep-alive may
// be a period and a second late.
func silenceOf(period time.Duration) time.Duration { return 2*period + time.Second }

// raiseKeepalives asks each session of all for the longer period p, one
// after the other (the sweeper found them asked less). The silence limit
// is raised before the frame is written, so an agent that takes the new
// period at once is never judged by the old one.
func (s *Server) raiseKeepalives(all []*agentSession, p time.Duration) {
	line, err := encodeFrame(api.SessionFrame{Type: api.FrameKeepalive, KeepaliveS: p.Seconds()})
	if err != nil {
		s.log.Error("encode a keep-alive period", "err", err)
		return
	}
	for _, a := range all {
		if !a.enter() {
			continue
		}
		if time.Duration(a.asked.Load()) < p {
			s.ask(a, p)
			if err := a.write(line); err != nil {
				a.cancel(fmt.Errorf("write keep-alive period: %w", err))
			}
		}
		a.passes.Done()
	}
}
