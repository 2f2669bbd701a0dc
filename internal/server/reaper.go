package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// ReapResult says what one reaper pass changed.
type ReapResult struct {
	Offline  []store.Agent // agents marked offline
	Failed   []store.Task  // their dispatched or running tasks, now failed
	TimedOut []store.Task  // tasks whose deadline passed
	// Gone are pending tasks failed because their source or destination
	// agent is gone (offline for OfflineAfter or more).
	Gone []store.Task
}

// Reap runs one reaper pass at the server's clock: it flushes the heartbeat
// cache, marks agents silent for OfflineAfter offline and fails their tasks
// ("agent went offline"), hands iperf tasks waiting on them to their
// sources with that reason, fails the pending tasks of agents that are gone
// ("agent UID offline since TIME", see goneBefore), and times out tasks
// past their deadline, so that every task, and every run, ends. Run
// calls it every ReapEvery; tests call it directly with an injected clock.
func (s *Server) Reap(ctx context.Context) (ReapResult, error) {
	var res ReapResult
	now := s.now()
	var errs []error
	// An open session is presence: flushBeats writes the sessions opened
	// here as held by this replica's presence lease (presence.go), and the
	// store leaves agents held by a live lease online. Keep-alives delayed
	// on a loaded machine do not make a held agent offline.
	if err := s.flushBeats(ctx); err != nil {
		// Marking agents offline from stale times would be wrong: skip.
		return res, fmt.Errorf("reaper: flush heartbeats: %w", err)
	}
	off, err := s.st.MarkSilentOffline(ctx, now.Add(-s.opts.OfflineAfter), now)
	if err != nil {
		errs = append(errs, fmt.Errorf("reaper: mark silent agents offline: %w", err))
	}
	res.Offline = off
	for _, a := range off {
		s.beats.offline(a.PodUID)
		s.log.Warn("agent offline", "pod_uid", a.PodUID, "pod", a.PodName, "node", a.NodeName, "last_heartbeat", a.LastHeartbeat)
		ts, err := s.st.FailAgentTasks(ctx, a.PodUID, store.ReasonAgentOffline, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("reaper: fail tasks of %s: %w", a.PodUID, err))
		}
		for _, t := range ts {
			s.disp.dropStaged(t.TaskID)
			s.log.Warn("task failed", "task_id", t.TaskID, "run_id", t.RunID, "reason", t.Reason)
		}
		res.Failed = append(res.Failed, ts...)
		s.forgetAgent(a.PodUID, "destination agent went offline before starting its server")
		s.publish(clusterMsg{Kind: msgOffline, Agent: a.PodUID})
	}
	if err := s.dropDeadPresence(ctx, now); err != nil {
		errs = append(errs, fmt.Errorf("reaper: %w", err))
	}
	if cut, ok := s.goneBefore(now); ok {
		gone, err := s.st.FailGoneAgentTasks(ctx, cut, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("reaper: fail pending tasks of gone agents: %w", err))
		}
		for _, t := range gone {
			s.log.Warn("task failed", "task_id", t.TaskID, "run_id", t.RunID, "reason", t.Reason)
		}
		res.Gone = gone
	}
	exp, err := s.st.ExpireDeadlines(ctx, now)
	if err != nil {
		errs = append(errs, fmt.Errorf("reaper: expire deadlines: %w", err))
	}
	for _, t := range exp {
		s.disp.dropStaged(t.TaskID)
		s.disp.stopTask(t.SrcPodUID, t.TaskID)
		s.log.Warn("task timed out", "task_id", t.TaskID, "run_id", t.RunID, "src", t.SrcPodUID)
	}
	res.TimedOut = exp
	s.disp.expire(now)
	if err := s.announceUnoffered(ctx, now); err != nil {
		errs = append(errs, fmt.Errorf("reaper: look for tasks dispatched and not offered: %w", err))
	}
	if len(res.Failed) > 0 || len(res.TimedOut) > 0 || len(res.Offline) > 0 || len(res.Gone) > 0 {
		s.disp.wakePending()
	}
	return res, errors.Join(errs...)
}

// goneBefore is the cut-off for agents that are gone: offline and silent
// for twice OfflineAfter (offline for OfflineAfter past the silence that
// made them offline), so that an agent back within that keeps its pending
// tasks.
// A server that started less than OfflineAfter ago judges no one (false):
// after a restart the agents need that long to come back, and their
// pending tasks wait for them meanwhile.
func (s *Server) goneBefore(now time.Time) (time.Time, bool) {
	if started := s.startedAt(); !started.IsZero() && now.Sub(started) < s.opts.OfflineAfter {
		return time.Time{}, false
	}
	return now.Add(-2 * s.opts.OfflineAfter), true
}

// startedAt is when Run started (zero: not running, as in tests that reap
// by hand).
func (s *Server) startedAt() time.Time {
	if ns := s.started.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
