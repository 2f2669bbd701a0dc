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
// heartbeat brings it back.
type testKeys struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

func newTestKeys() *testKeys { return &testKeys{m: map[string][]byte{}} }

// set records uid's secret and reports whether it is new or changed.
func (k *testKeys) set(uid string, secret []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := !bytes.Equal(k.m[uid], secret)
	k.m[uid] = secret
	return changed
}

func (k *testKeys) get(uid string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[uid]
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
	missing := map[string]bool{} // destinations waited for in vain
	for i := range ts {
		t := &ts[i]
		// Derived afresh at every hand-out (a re-offer too): a destination
		// that restarted since has a new secret.
		t.TestKey = ""
		if t.Type != api.TypeProbe || t.Spec == nil {
			continue
		}
		switch t.Spec.Kind {
		case probe.KindPing, probe.KindTrace:
			continue
		}
		secret := s.keys.get(t.DstPodUID)
		if secret == nil && !missing[t.DstPodUID] {
			s.askSecret(t.DstPodUID) // it may beat on another replica
		}
		for until := time.Now().Add(secretWait); secret == nil && !missing[t.DstPodUID] && time.Now().Before(until) && ctx.Err() == nil; {
			time.Sleep(50 * time.Millisecond)
			secret = s.keys.get(t.DstPodUID)
		}
		if secret == nil {
			missing[t.DstPodUID] = true
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
