package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/cnperf/cnperf/internal/store"
)

// ReapResult says what one reaper pass changed.
type ReapResult struct {
	Offline  []store.Agent // agents marked offline
	Failed   []store.Task  // their dispatched or running tasks, now failed
	TimedOut []store.Task  // tasks whose deadline passed
}

// Reap runs one reaper pass at the server's clock: it flushes the heartbeat
// cache, marks agents silent for OfflineAfter offline and fails their tasks
// ("agent went offline"), hands iperf tasks waiting on them to their
// sources with that reason, and times out tasks past their deadline. Run
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
	if len(res.Failed) > 0 || len(res.TimedOut) > 0 || len(res.Offline) > 0 {
		s.disp.wakePending()
	}
	return res, errors.Join(errs...)
}
