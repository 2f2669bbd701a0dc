package server

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/udp"
)

// Test keys: each probe task's source agent gets a one-time key, bound to
// the task's test, that the destination agent's responder checks before it
// serves the session (see docs/control-plane.md, "Test keys", and
// probe.DerivedKeys). The key is derived from the secret the
// destination's responder sent in its heartbeats, the task id, the task's
// deadline and the test's bounds (probe.TestBounds), so the destination
// knows it without being told, the key expires with the task and admits
// no bigger test.

// testKeys holds each online agent's responder secret, in memory only
// (never stored, logged or answered): after a server restart the next
// heartbeat brings it back. A fetch that needs a secret this replica does
// not hold waits for it with wait: set wakes it the moment the secret
// arrives (over the bus, from the replica the destination beats on).
type testKeys struct {
	mu    sync.Mutex // guards m and waits
	m     map[string][]byte
	waits map[string][]chan struct{} // uid → waiters, woken (closed) by set
}

func newTestKeys() *testKeys {
	return &testKeys{m: map[string][]byte{}, waits: map[string][]chan struct{}{}}
}

// set records uid's secret, wakes those waiting for it, and reports
// whether it is new or changed.
func (k *testKeys) set(uid string, secret []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := !bytes.Equal(k.m[uid], secret)
	k.m[uid] = secret
	for _, c := range k.waits[uid] {
		close(c)
	}
	delete(k.waits, uid)
	return changed
}

func (k *testKeys) get(uid string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[uid]
}

// wait returns uid's secret once it is known, or nil when ctx ends first.
func (k *testKeys) wait(ctx context.Context, uid string) []byte {
	k.mu.Lock()
	if s := k.m[uid]; s != nil {
		k.mu.Unlock()
		return s
	}
	c := make(chan struct{})
	k.waits[uid] = append(k.waits[uid], c)
	k.mu.Unlock()
	select {
	case <-c:
		return k.get(uid)
	case <-ctx.Done():
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	ws := k.waits[uid]
	for i, w := range ws {
		if w == c {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(k.waits, uid)
	} else {
		k.waits[uid] = ws
	}
	return k.m[uid] // set may have come between ctx's end and the lock
}

// forget drops the secret of an agent that went offline.
func (k *testKeys) forget(uid string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, uid)
}

// secretWait bounds how long a fetch waits for a destination's secret the
// server does not know yet (it restarted since the destination's last
// heartbeat): a heartbeat comes every second.
const secretWait = 3 * time.Second

// giveTestKeys sets the test key of every probe task in ts that targets a
// responder (tcp, udp, rr, stamp).
func (s *Server) giveTestKeys(ctx context.Context, ts []api.AgentTask) {
	// The secrets this replica does not hold are asked for all at once
	// (one bus message), then waited for together: each wait ends when its
	// secret arrives, so a miss costs one bus round trip.
	var ask []clusterMsg
	asked := map[string]bool{}
	for i := range ts {
		t := &ts[i]
		if needsTestKey(*t) && !asked[t.DstPodUID] && s.keys.get(t.DstPodUID) == nil {
			asked[t.DstPodUID] = true
			ask = append(ask, clusterMsg{Kind: msgWantSecret, Agent: t.DstPodUID}) // it may beat on another replica
		}
	}
	s.publish(ask...)
	wctx, cancel := context.WithTimeout(ctx, secretWait)
	defer cancel()
	for i := range ts {
		t := &ts[i]
		// Derived afresh at every hand-out (a re-offer too): a destination
		// that restarted since has a new secret.
		t.TestKey = ""
		if !needsTestKey(*t) {
			continue
		}
		secret := s.keys.wait(wctx, t.DstPodUID)
		if secret == nil {
			// The responder will refuse the session and the task fail,
			// saying it carried no key.
			s.log.Warn("no responder secret known for a task's destination; the task gets no test key", "task_id", t.TaskID, "dst", t.DstPodUID)
			continue
		}
		expires := t.Deadline
		if expires.IsZero() {
			expires = s.now().Add(time.Duration(t.TimeoutS*float64(time.Second)) + s.opts.Grace)
		}
		// The key binds the task's test: the responder refuses a session
		// that asks for more and ends it at the test's end.
		defaultRate := uint64(0) // tcp: as fast as the path allows; rr: no rate
		if t.Spec.Kind == probe.KindUDP {
			defaultRate = udp.DefaultRateBps
		}
		t.TestKey = probe.DeriveTestKey(secret, t.TaskID, expires, probe.BoundsOf(*t.Spec, defaultRate))
	}
}

// needsTestKey reports whether t is a probe task aimed at a responder
// (tcp, udp, rr, stamp), whose source needs a test key.
func needsTestKey(t api.AgentTask) bool {
	if t.Type != api.TypeProbe || t.Spec == nil {
		return false
	}
	switch t.Spec.Kind {
	case probe.KindPing, probe.KindTrace:
		return false
	}
	return true
}
