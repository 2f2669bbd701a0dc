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
	agent store.Agent
	now   time.Time
	done  chan struct{}
	out   store.Agent
	err   error
}

// register writes one heartbeat, batched with concurrent ones, and returns
// the stored agent.
func (r *registrar) register(ctx context.Context, a store.Agent, now time.Time) (store.Agent, error) {
	reg := &registration{agent: a, now: now, done: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, reg)
	lead := !r.running
	r.running = true
	r.mu.Unlock()
	if lead {
		// Lead until this heartbeat is written; whoever is still waiting
		// then gets a new leader in the background.
		r.writeBatch()
		r.mu.Lock()
		more := len(r.pending) > 0
		if !more {
			r.running = false
		}
		r.mu.Unlock()
		if more {
			go r.drain()
		}
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
	n := min(len(r.pending), maxRegisterBatch)
	batch := r.pending[:n:n]
	r.pending = r.pending[n:]
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
