package server

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// Hand-out at creation. A task created through the API used to wait,
// pending, for its source's own claim: the creating replica woke the
// source (addPending, a NOTIFY to the other replicas), the replica holding
// the source's session claimed in a store transaction of its own, and
// only then offered it. A matrix round of 50 pairs was 50 such
// transactions at once, queued on the database and the cores, and the
// median task waited behind half of them. Now a run is created and
// claimed in one transaction (store.CreateRunAndClaim; a v1 task list is
// claimed right after its insert, store.ClaimCreated): every new task
// whose source holds a session (a live presence lease) and whose
// destination is online is stored dispatched, under the exclusive rule
// and the per-source limit of any claim. handOut then sends each to its
// source: into this replica's mail when the session is here (or there are
// no other replicas), and in an "offer" message on the bus, which the
// replica holding the session puts in its mail. A session answers its
// agent's pull from the mail without a claim of its own. What cannot go
// at once (no session, destination offline, a node busy, iperf tasks that
// need their destination's server first) stays pending and wakes its
// source as before.
//
// The bus is best effort. A claimed task whose offer message was lost is
// found by the leader's reaper: a task still dispatched ReofferAfter x 2
// after its claim is announced again ("unoffered"), and the replica
// holding its source records it as an offer handed out long ago, so the
// re-offer machinery (redispatch.go) sends it unless the agent says it
// holds it. An agent that moved to another replica meanwhile gets it from
// that replica's first look at its dispatched tasks (seedAgentOffers).

// maxHandOut bounds the tasks of one creation claimed at once (the rest
// wait for their sources' own claims).
const maxHandOut = 1000

// createClaim is what a creation claims at once: what a source's own
// claim would take, except the iperf tasks (their destination's server
// starts first, claim's stage).
func (s *Server) createClaim() store.CreateClaim {
	return store.CreateClaim{Limit: claimLimit, Grace: s.opts.Grace, Except: []string{api.TypeIperf, api.TypeIperf3}}
}

// handOutCreated claims the tasks just created (without a run: the v1
// task list) that can go now, replacing each in created with its
// dispatched self, and hands them out (handOut).
func (s *Server) handOutCreated(ctx context.Context, created []store.Task) {
	c := s.createClaim()
	ids := make([]int64, 0, len(created))
	for _, t := range created {
		if !slices.Contains(c.Except, t.Type) {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) > 0 && len(ids) <= maxHandOut {
		claimed, err := s.st.ClaimCreated(ctx, ids, s.now(), c.Limit, c.Grace)
		if err != nil {
			// They stay pending (or, if the claim committed after all,
			// dispatched: the reaper's look for unoffered tasks finds them).
			s.log.Warn("claim tasks at their creation", "tasks", len(ids), "err", err)
		}
		byID := make(map[int64]store.Task, len(claimed))
		for _, t := range claimed {
			byID[t.ID] = t
		}
		for i, t := range created {
			if d, ok := byID[t.ID]; ok {
				created[i] = d
			}
		}
	}
	s.handOut(created, nil)
}

// handOut sends each task of a creation that was dispatched at once to
// its source (this replica's mail, and an offer message for the replica
// holding it unless sent names it: its offer went with the creating
// transaction, directOffers) and wakes the sources of the pending ones.
func (s *Server) handOut(created []store.Task, sent map[string]bool) {
	var msgs []clusterMsg
	var pending []store.Task
	for _, t := range created {
		if t.State != store.TaskDispatched {
			pending = append(pending, t)
			continue
		}
		at := agentTask(t)
		if s.opts.Bus == nil || s.disp.knows(t.SrcPodUID) {
			s.disp.requeue(t.SrcPodUID, at)
		}
		if sent[t.TaskID] {
			continue
		}
		if m, ok := offerMsg(msgOffer, t.SrcPodUID, at); ok {
			msgs = append(msgs, m)
		}
	}
	s.publish(msgs...)
	s.addPendingOf(pending)
}

// directOffers sets c.Notify, when the bus addresses replicas, to send
// each claimed task's offer inside the creating transaction to the
// replica holding its source's session (when that is another one): the
// offers reach their replicas at the commit, with no NOTIFY of their own
// after it, and each replica reads only its own agents' offers. It
// returns the set of task ids whose offers Notify sent, for handOut.
func (s *Server) directOffers(c *store.CreateClaim) (sent map[string]bool) {
	bus, ok := s.opts.Bus.(DirectBus)
	if !ok {
		return nil
	}
	sent = map[string]bool{}
	c.Notify = func(claimed []store.Task, heldBy map[string]string) []store.Notice {
		byReplica := map[string][]string{}
		var replicas []string
		for _, t := range claimed {
			r := heldBy[t.SrcPodUID]
			if r == "" || r == s.opts.ReplicaID {
				continue
			}
			m, ok := offerMsg(msgOffer, t.SrcPodUID, agentTask(t))
			if !ok {
				continue
			}
			b, err := json.Marshal(m)
			if err != nil {
				continue
			}
			if _, ok := byReplica[r]; !ok {
				replicas = append(replicas, r)
			}
			byReplica[r] = append(byReplica[r], string(b))
			sent[t.TaskID] = true
		}
		var notices []store.Notice
		for _, r := range replicas {
			channel, payloads := bus.Direct(r, byReplica[r])
			for _, p := range payloads {
				notices = append(notices, store.Notice{Channel: channel, Payload: p})
			}
		}
		return notices
	}
	return sent
}

// offerMsg is a cluster message of kind carrying a task for its source.
func offerMsg(kind, uid string, at api.AgentTask) (clusterMsg, bool) {
	b, err := json.Marshal(at)
	if err != nil {
		return clusterMsg{}, false
	}
	return clusterMsg{Kind: kind, Agent: uid, Task: at.TaskID, Data: string(b)}, true
}

// applyOffer does what an offer or unoffered message asks, when the
// agent is held here.
func (s *Server) applyOffer(m clusterMsg) {
	if !s.disp.knows(m.Agent) {
		return
	}
	var at api.AgentTask
	if err := json.Unmarshal([]byte(m.Data), &at); err != nil || at.TaskID == "" {
		s.log.Warn("unreadable task in a cluster message", "kind", m.Kind, "pod_uid", m.Agent, "err", err)
		return
	}
	if m.Kind == msgOffer {
		s.disp.requeue(m.Agent, at)
		return
	}
	s.noteUnoffered(m.Agent, at)
}

// noteUnoffered records a task dispatched long ago as an offer handed out
// long ago, unless this replica tracks its offer already, so that the
// agent's next re-offer look sends it unless the agent holds it.
func (s *Server) noteUnoffered(uid string, at api.AgentTask) {
	if !s.offers.seed(uid, at) {
		return
	}
	if a := s.sessions.get(uid); a != nil {
		s.scheduleReoffer(a)
	}
}

// announceUnoffered tells every replica (this one too) of the tasks still
// dispatched, not started, 2 x ReofferAfter after their claim (at most a
// page of them a pass): the leader's reaper calls it. A task is announced
// in the passes of three reaper periods after that, not for ever: a seed
// agent never starts its tasks (they stay dispatched until reported), and
// an agent that comes back later gets its tasks from the replica it comes
// to (seedAgentOffers) or they end at their deadline.
func (s *Server) announceUnoffered(ctx context.Context, now time.Time) error {
	before := now.Add(-2 * s.opts.ReofferAfter)
	ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{State: store.TaskDispatched,
		DispatchedAfter: before.Add(-3 * s.opts.ReapEvery), DispatchedBefore: before}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		return err
	}
	msgs := make([]clusterMsg, 0, len(ts))
	for _, t := range ts {
		if t.Type == api.TypeIperf || t.Type == api.TypeIperf3 {
			continue // hand-offs are left to their deadline (seedOffers)
		}
		at := agentTask(t)
		if s.disp.knows(t.SrcPodUID) {
			s.noteUnoffered(t.SrcPodUID, at)
		}
		if m, ok := offerMsg(msgUnoffered, t.SrcPodUID, at); ok {
			msgs = append(msgs, m)
		}
	}
	s.publish(msgs...)
	return nil
}
