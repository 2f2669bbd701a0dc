package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// The reaper runs once per cluster: every ReapEvery each replica tries to
// take or renew the lease "reaper" in the database (store.HoldLease, TTL
// LeaseTTL); the one that holds it reaps, the others only drop their own
// expired iperf hand-offs. A leader that dies stops renewing, and another
// replica takes the lease over once it expired (within LeaseTTL +
// ReapEvery). On SQLite the single process always holds it. The lease is
// not a fencing token: a leader paused past its expiry may finish one pass
// beside its successor, which is harmless because every reaper write is
// conditional on the row's state (an agent silent since, a task still
// running past its deadline).

// reapIfLeader reaps when this replica holds the reaper lease.
func (s *Server) reapIfLeader(ctx context.Context) error {
	lead, err := s.holdLease(ctx)
	if err != nil {
		s.disp.expire(s.now())
		return err
	}
	if !lead {
		s.disp.expire(s.now())
		return nil
	}
	_, err = s.Reap(ctx)
	return err
}

// holdLease takes or renews the reaper lease and logs a change of leader.
func (s *Server) holdLease(ctx context.Context) (bool, error) {
	l, err := s.st.HoldLease(ctx, reaperLease, s.opts.ReplicaID, s.now(), s.opts.LeaseTTL)
	if err != nil {
		s.setLeader(false, "")
		return false, fmt.Errorf("leader lease: %w", err)
	}
	s.setLeader(l.Held, l.Holder)
	return l.Held, nil
}

func (s *Server) setLeader(held bool, holder string) {
	if s.leader.Swap(held) != held {
		if held {
			s.log.Info("this replica leads: it runs the reaper", "replica", s.opts.ReplicaID)
		} else {
			s.log.Info("this replica no longer leads", "replica", s.opts.ReplicaID, "leader", holder)
		}
	}
}

// Leader reports whether this replica held the reaper lease at its last
// try.
func (s *Server) Leader() bool { return s.leader.Load() }

// ReplicaID names this replica.
func (s *Server) ReplicaID() string { return s.opts.ReplicaID }

// releaseLease gives the lease up at a clean stop, so another replica
// leads at its next try instead of after the expiry.
func (s *Server) releaseLease(ctx context.Context) {
	if !s.leader.Load() {
		return
	}
	if err := s.st.ReleaseLease(ctx, reaperLease, s.opts.ReplicaID); err != nil {
		s.log.Warn("release the leader lease", "err", err)
	}
	s.setLeader(false, "")
}

// NewReplicaID is the host name, the process id and a random suffix
// (a restarted pod keeps its name, not its lease).
func NewReplicaID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
