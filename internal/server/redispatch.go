package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// At-least-once dispatch. A fetch answer can be lost after the store
// marked its tasks dispatched (a proxy drops it, the connection breaks):
// the agent never saw them, and before this they stayed dispatched until
// their deadline. Now the server remembers what it handed to each agent
// (an offer) until the agent acknowledges it: the task appears in a
// heartbeat's running or undelivered list, the agent calls start, or a
// report arrives. A heartbeat that arrives ReofferAfter or more after the
// offer without the task in either list, while the store still holds the
// task dispatched, re-offers it: the same task, same id, queued for the
// agent's next fetch and its long poll woken. The agent starts a task id
// at most once (it ignores one it holds or has finished), so a re-offer
// that crossed the agent's acknowledgement costs one ignored entry.

// DefaultReofferAfter is how long an offered task may go unacknowledged
// before a heartbeat re-offers it. Agents beat every second and list a
// task as soon as they accept it, so 2 s leaves a beat in flight; a lost
// answer is re-offered within about 3 s of the loss.
const DefaultReofferAfter = 2 * time.Second

// offers holds, per agent, the tasks handed out and not yet acknowledged.
// Entries end when acknowledged, when the store says the task is no longer
// dispatched, or when the agent is forgotten (offline): at most the
// dispatched tasks are held.
type offers struct {
	mu   sync.Mutex                       // guards m and seen
	m    map[string]map[string]*offerItem // agent uid → task id → offer
	seen map[string]bool                  // agents whose dispatched tasks were loaded (replicas)
}

type offerItem struct {
	task api.AgentTask
	at   time.Time // when last handed out
}

func newOffers() *offers {
	return &offers{m: map[string]map[string]*offerItem{}, seen: map[string]bool{}}
}

// firstBeat reports whether uid's heartbeat is the first this replica
// sees since it started or forgot the agent, and marks it seen.
func (o *offers) firstBeat(uid string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[uid] {
		return false
	}
	o.seen[uid] = true
	return true
}

// handed records tasks written to the agent's fetch answer at now.
func (o *offers) handed(uid string, ts []api.AgentTask, now time.Time) {
	if len(ts) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.of(uid)
	for _, t := range ts {
		m[t.TaskID] = &offerItem{task: t, at: now}
	}
}

// of returns uid's offers, made if it has none; o.mu must be held.
func (o *offers) of(uid string) map[string]*offerItem {
	m := o.m[uid]
	if m == nil {
		m = map[string]*offerItem{}
		o.m[uid] = m
	}
	return m
}

// seed records t as handed to uid long ago, unless an offer of it is
// held; it reports whether it recorded one.
func (o *offers) seed(uid string, t api.AgentTask) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.of(uid)
	if m[t.TaskID] != nil {
		return false
	}
	m[t.TaskID] = &offerItem{task: t}
	return true
}

// ack forgets the offer of a task (started, reported, ended).
func (o *offers) ack(uid, taskID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m := o.m[uid]; m != nil {
		delete(m, taskID)
		if len(m) == 0 {
			delete(o.m, uid)
		}
	}
}

// forget drops every offer of an agent (it went offline; its tasks failed).
func (o *offers) forget(uid string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, uid)
	delete(o.seen, uid)
}

// overdue acknowledges the offers the agent lists in held and returns the
// others handed out before cutoff.
func (o *offers) overdue(uid string, held map[string]bool, cutoff time.Time) []api.AgentTask {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.m[uid]
	var out []api.AgentTask
	for id, it := range m {
		switch {
		case held[id]:
			delete(m, id)
		case !it.at.After(cutoff):
			out = append(out, it.task)
		}
	}
	if len(m) == 0 {
		delete(o.m, uid)
	}
	return out
}

// holds reports whether any offer to uid is unacknowledged.
func (o *offers) holds(uid string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m[uid]) > 0
}

// len counts the offers held (tests, metrics).
func (o *offers) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.m {
		n += len(m)
	}
	return n
}

// reoffer compares a heartbeat's running and undelivered lists with what
// was handed to the agent and re-offers the tasks it does not hold.
// An agent that sends no boot ID (the seed's) lists nothing: it is left
// alone. It returns how many tasks it re-offered.
func (s *Server) reoffer(ctx context.Context, hb api.Heartbeat, now time.Time) (n int) {
	if hb.BootID == "" {
		return 0
	}
	held := make(map[string]bool, len(hb.Running)+len(hb.Undelivered))
	for _, id := range hb.Running {
		held[id] = true
	}
	for _, id := range hb.Undelivered {
		held[id] = true
	}
	if s.opts.Bus != nil && s.offers.firstBeat(hb.PodUID) {
		s.seedAgentOffers(ctx, hb.PodUID)
	}
	due := s.offers.overdue(hb.PodUID, held, now.Add(-s.opts.ReofferAfter))
	for _, at := range due {
		t, err := s.st.GetTask(ctx, at.TaskID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			s.offers.ack(hb.PodUID, at.TaskID)
			continue
		case err != nil:
			s.log.Warn("look up an unacknowledged task", "task_id", at.TaskID, "err", err)
			continue
		case t.State != store.TaskDispatched:
			s.offers.ack(hb.PodUID, at.TaskID) // started, ended or cancelled meanwhile
			continue
		}
		s.offers.handed(hb.PodUID, []api.AgentTask{at}, now)
		s.disp.requeue(hb.PodUID, at)
		s.log.Warn("re-offering a task its agent did not acknowledge", "task_id", at.TaskID, "pod_uid", hb.PodUID)
		n++
	}
	return n
}

// seedOffers re-creates, after a restart, the offers of tasks the store
// holds dispatched: their fetch answers may have been lost with the
// previous process. iperf hand-offs are not re-created (the destination's
// server is gone with the old process's memory): they time out as before.
func (s *Server) seedOffers(ctx context.Context) error {
	now := s.now()
	var after int64
	for {
		ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{State: store.TaskDispatched}, store.Page{Limit: store.MaxPageLimit, AfterID: after})
		if err != nil {
			return err
		}
		for _, t := range ts {
			after = t.ID
			if t.Type == api.TypeIperf || t.Type == api.TypeIperf3 {
				continue
			}
			s.offers.handed(t.SrcPodUID, []api.AgentTask{agentTask(t)}, now)
		}
		if len(ts) < store.MaxPageLimit {
			return nil
		}
	}
}

// seedAgentOffers makes offers of the tasks the store holds dispatched to
// an agent that this replica sees for the first time: with replicas, an
// agent arrives here when the replica it used died, possibly taking a
// fetch answer with it. They are offers handed out long ago, so this
// heartbeat re-offers those the agent does not list. iperf tasks are left
// to their deadline, as after a restart (seedOffers).
func (s *Server) seedAgentOffers(ctx context.Context, uid string) {
	ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{AgentUID: uid, State: store.TaskDispatched}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		s.log.Warn("list the dispatched tasks of an agent new to this replica", "pod_uid", uid, "err", err)
		return
	}
	var long []api.AgentTask
	for _, t := range ts {
		if t.SrcPodUID != uid || t.Type == api.TypeIperf || t.Type == api.TypeIperf3 {
			continue
		}
		long = append(long, agentTask(t))
	}
	s.offers.handed(uid, long, time.Time{})
}
