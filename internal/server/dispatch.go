package server

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// dispatcher is the in-memory rendezvous of long polls: a wake-up channel
// per agent, the agents that have pending tasks, iperf hand-offs waiting for
// their destination, and mail (tasks, server requests, cancellations)
// waiting for an agent's next fetch or heartbeat.
type dispatcher struct {
	mu      sync.Mutex // guards every field below
	wake    map[string]chan struct{}
	pending map[string]bool               // source agents with (possibly) pending tasks
	staged  map[string]*handoff           // task id → iperf hand-off waiting for its destination
	tasks   map[string][]api.AgentTask    // agent → tasks ready for it
	serve   map[string][]api.ServeRequest // agent → servers to start
	cancel  map[string][]string           // agent → task ids to stop
	hooks   map[string]*wakeHook          // agent → its session's wake-up (instead of a channel)
	// share, when set, tells the other replicas of a wake-up this one
	// had (cluster.go): addPending, wakePending and stopTask call it, so
	// an agent whose long poll (or session) is held by another replica
	// is woken too. Set before serving; never changed after.
	share func(...clusterMsg)
}

// wakeHook is a session's wake-up: called, under the dispatcher's lock,
// wherever the agent's channel is notified; it must not block.
type wakeHook struct{ fn func() }

type handoff struct {
	task    api.AgentTask
	src     string
	dst     string
	expires time.Time
}

func newDispatcher() *dispatcher {
	return &dispatcher{
		wake:    map[string]chan struct{}{},
		pending: map[string]bool{},
		staged:  map[string]*handoff{},
		tasks:   map[string][]api.AgentTask{},
		serve:   map[string][]api.ServeRequest{},
		cancel:  map[string][]string{},
		hooks:   map[string]*wakeHook{},
	}
}

// ch returns the agent's wake-up channel (capacity 1: a wake-up is never
// lost, and many collapse into one).
func (d *dispatcher) ch(uid string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.chLocked(uid)
}

func (d *dispatcher) chLocked(uid string) chan struct{} {
	c := d.wake[uid]
	if c == nil {
		c = make(chan struct{}, 1)
		d.wake[uid] = c
	}
	return c
}

// notifyLocked wakes the agent's session and its long poll, if it has
// either here. It makes no channel: one made for an agent whose session
// or poll is on another replica would have this one "know" the agent
// (knowsLocked) and keep its mail and cancellations until it goes
// offline. A long poll takes its channel before it looks at the store,
// so a wake-up sent before that has nothing to wake.
func (d *dispatcher) notifyLocked(uid string) {
	if h := d.hooks[uid]; h != nil {
		h.fn()
	}
	if c := d.wake[uid]; c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// knows reports whether the agent polls this replica or holds a session
// here (it has a wake-up channel or a session's hook).
func (d *dispatcher) knows(uid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.knowsLocked(uid)
}

func (d *dispatcher) knowsLocked(uid string) bool {
	return d.wake[uid] != nil || d.hooks[uid] != nil
}

// notify wakes the agent's long poll.
func (d *dispatcher) notify(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notifyLocked(uid)
}

// addPending records that each of uids has pending tasks and wakes it,
// here and on the other replicas: their messages go in one share, so the
// replica holding the last source's session hears of it no later than the
// first's (a run of 50 tasks is one NOTIFY, not one and then 49).
func (d *dispatcher) addPending(uids ...string) {
	ms := make([]clusterMsg, 0, len(uids))
	seen := make(map[string]bool, len(uids))
	for _, uid := range uids {
		if seen[uid] {
			continue
		}
		seen[uid] = true
		d.addPendingLocal(uid)
		ms = append(ms, clusterMsg{Kind: msgPending, Agent: uid})
	}
	d.tell(ms...)
}

func (d *dispatcher) addPendingLocal(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[uid] = true
	d.notifyLocked(uid)
}

// tell shares ms, together, with the other replicas, if there are any.
func (d *dispatcher) tell(ms ...clusterMsg) {
	if d.share != nil && len(ms) > 0 {
		d.share(ms...)
	}
}

// clearPending forgets that uid has pending tasks.
func (d *dispatcher) clearPending(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, uid)
}

// hasPending reports whether uid may have pending tasks.
func (d *dispatcher) hasPending(uid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending[uid]
}

// wakePending wakes every agent with pending tasks: a node freed up or an
// agent came online, so tasks held back may now be claimable. The other
// replicas wake theirs too.
func (d *dispatcher) wakePending() {
	d.wakePendingLocal()
	d.tell(clusterMsg{Kind: msgWakePending})
}

func (d *dispatcher) wakePendingLocal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for uid := range d.pending {
		d.notifyLocked(uid)
	}
}

// stage holds an iperf task until its destination has started the server.
// The destination may poll another replica: it gets the request there
// (its answer comes back through the bus, see Server.servedElsewhere).
func (d *dispatcher) stage(t api.AgentTask, src string, req api.ServeRequest, expires time.Time) {
	d.mu.Lock()
	d.staged[t.TaskID] = &handoff{task: t, src: src, dst: t.DstPodUID, expires: expires}
	d.serve[t.DstPodUID] = append(d.serve[t.DstPodUID], req)
	d.notifyLocked(t.DstPodUID)
	d.mu.Unlock()
	if b, err := json.Marshal(req); err == nil {
		d.tell(clusterMsg{Kind: msgServe, Agent: t.DstPodUID, Task: t.TaskID, Data: string(b)})
	}
}

// serveLocal queues another replica's server request for dst, when dst
// polls this replica.
func (d *dispatcher) serveLocal(dst string, req api.ServeRequest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.knowsLocked(dst) {
		return
	}
	d.serve[dst] = append(d.serve[dst], req)
	d.notifyLocked(dst)
}

// served completes a hand-off: the task goes to its source with the port or
// the error. ok is false when no hand-off for this task and destination is
// waiting.
func (d *dispatcher) served(taskID, dst string, port int, serveErr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.staged[taskID]
	if h == nil || h.dst != dst {
		return false
	}
	delete(d.staged, taskID)
	h.task.DstPort = port
	h.task.ServeError = serveErr
	d.tasks[h.src] = append(d.tasks[h.src], h.task)
	d.notifyLocked(h.src)
	return true
}

// failStagedFor hands every task waiting on destination dst to its source
// with the error.
func (d *dispatcher) failStagedFor(dst, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, h := range d.staged {
		if h.dst != dst {
			continue
		}
		delete(d.staged, id)
		h.task.ServeError = reason
		d.tasks[h.src] = append(d.tasks[h.src], h.task)
		d.notifyLocked(h.src)
	}
	delete(d.serve, dst)
}

// dropStaged forgets a hand-off (its task ended) and its server request.
func (d *dispatcher) dropStaged(taskID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.staged[taskID]
	if h == nil {
		return
	}
	delete(d.staged, taskID)
	reqs := d.serve[h.dst][:0]
	for _, r := range d.serve[h.dst] {
		if r.TaskID != taskID {
			reqs = append(reqs, r)
		}
	}
	d.serve[h.dst] = reqs
}

// expire drops hand-offs past their expiry (their task timed out).
func (d *dispatcher) expire(now time.Time) {
	d.mu.Lock()
	var ids []string
	for id, h := range d.staged {
		if now.After(h.expires) {
			ids = append(ids, id)
		}
	}
	d.mu.Unlock()
	for _, id := range ids {
		d.dropStaged(id)
	}
}

// stopTask tells the task's agent to stop it (at its next fetch or
// heartbeat), through whichever replica holds it.
func (d *dispatcher) stopTask(agent, taskID string) {
	d.stopTaskLocal(agent, taskID)
	d.tell(clusterMsg{Kind: msgStop, Agent: agent, Task: taskID})
}

// stopTaskLocal queues the stop here (for the agent's next fetch or
// heartbeat), unless other replicas exist and the agent is not held
// here: the one place that decides it, for this replica's stops and
// the bus's alike.
func (d *dispatcher) stopTaskLocal(agent, taskID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.share != nil && !d.knowsLocked(agent) {
		// Another replica holds it (and got the stop), or none does:
		// its next heartbeat learns that the task ended.
		return
	}
	for _, id := range d.cancel[agent] {
		if id == taskID {
			return
		}
	}
	d.cancel[agent] = append(d.cancel[agent], taskID)
	d.notifyLocked(agent)
}

// requeue puts a task back in the agent's mail (a re-offer) unless it is
// already there, and wakes its long poll.
func (d *dispatcher) requeue(uid string, t api.AgentTask) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.tasks[uid] {
		if q.TaskID == t.TaskID {
			return
		}
	}
	d.tasks[uid] = append(d.tasks[uid], t)
	d.notifyLocked(uid)
}

// hasMail reports whether tasks wait in the agent's mail.
func (d *dispatcher) hasMail(uid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.tasks[uid]) > 0
}

// mail takes what is waiting for the agent.
func (d *dispatcher) mail(uid string) (tasks []api.AgentTask, serve []api.ServeRequest, cancel []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tasks, serve, cancel = d.tasks[uid], d.serve[uid], d.cancel[uid]
	delete(d.tasks, uid)
	delete(d.serve, uid)
	delete(d.cancel, uid)
	return tasks, serve, cancel
}

// forget drops everything held for an agent that went offline (its tasks
// were failed): its wake-up channel, pending hint and mail. A long poll
// still waiting on the old channel ends at its wait.
func (d *dispatcher) forget(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.wake, uid)
	delete(d.pending, uid)
	delete(d.tasks, uid)
	delete(d.serve, uid)
	delete(d.cancel, uid)
}

// takeCancel takes the agent's cancellations only.
func (d *dispatcher) takeCancel(uid string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cancel[uid]
	delete(d.cancel, uid)
	return c
}

// hold makes fn the agent's session's wake-up: notify calls it (as well
// as waking a long poll) until release. A newer session's hold replaces an
// older one's.
func (d *dispatcher) hold(uid string, fn func()) *wakeHook {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := &wakeHook{fn: fn}
	d.hooks[uid] = h
	return h
}

// release ends a hold (unless a newer one replaced it).
func (d *dispatcher) release(uid string, h *wakeHook) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hooks[uid] == h {
		delete(d.hooks, uid)
	}
}

// takeServeCancel takes the agent's server requests and cancellations,
// leaving its tasks (a session that has not asked for tasks).
func (d *dispatcher) takeServeCancel(uid string) (serve []api.ServeRequest, cancel []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	serve, cancel = d.serve[uid], d.cancel[uid]
	delete(d.serve, uid)
	delete(d.cancel, uid)
	return serve, cancel
}
