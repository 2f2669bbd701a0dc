package server

import (
	"context"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// maxRegisterBatch bounds the heartbeats one registration transaction
// writes.
const maxRegisterBatch = 500

// registrar writes the heartbeats that must reach the store at once (new
// agents, changed identities, agents back from offline) with group commit:
// heartbeats arriving while a transaction runs are written together in the
// next one. A burst of registrations (a DaemonSet rolling out) then costs
// a few transactions instead of one per agent, and the single SQLite
// writer stays free for the flusher, claims and reports.
type registrar struct {
	st store.Store

	mu      sync.Mutex // guards pending and running
	pending []*registration
	running bool
}

type registration struct {
	ctx   context.Context // the waiter's: once it ends, nobody needs the write
	agent store.Agent
	now   time.Time
	done  chan struct{}
	out   store.Agent
	err   error
}

// register writes one heartbeat, batched with concurrent ones, and returns
// the stored agent. It waits no longer than ctx: the write runs in a
// goroutine of its own, not in the caller's (a caller that led a batch
// used to wait for the whole transaction, whatever its own deadline),
// and a registration whose caller left before its batch was formed is
// dropped, not written: under a burst past the store's pace, the store
// then works only for callers still waiting.
func (r *registrar) register(ctx context.Context, a store.Agent, now time.Time) (store.Agent, error) {
	reg := &registration{ctx: ctx, agent: a, now: now, done: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, reg)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.drain()
	}
	select {
	case <-reg.done:
		return reg.out, reg.err
	case <-ctx.Done():
		return store.Agent{}, ctx.Err()
	}
}

// drain writes batches until none is pending.
func (r *registrar) drain() {
	for {
		r.writeBatch()
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// writeBatch writes up to maxRegisterBatch pending heartbeats in one
// transaction, each batch stamped with the earliest of their times.
func (r *registrar) writeBatch() {
	r.mu.Lock()
	var batch []*registration
	for len(r.pending) > 0 && len(batch) < maxRegisterBatch {
		reg := r.pending[0]
		r.pending[0] = nil
		r.pending = r.pending[1:]
		if err := reg.ctx.Err(); err != nil {
			reg.err = err
			close(reg.done)
			continue
		}
		batch = append(batch, reg)
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	agents := make([]store.Agent, len(batch))
	now := batch[0].now
	for i, reg := range batch {
		agents[i] = reg.agent
		if reg.now.Before(now) {
			now = reg.now
		}
	}
	// Not the leader's request context: others wait on this write.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := r.st.RegisterAgents(ctx, agents, now)
	for i, reg := range batch {
		if err != nil {
			reg.err = err
		} else {
			reg.out = out[i]
		}
		close(reg.done)
	}
}
