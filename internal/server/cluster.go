package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// Replicas. Several servers may share one PostgreSQL database; any of
// them answers any request. What they keep in memory is shared in two
// ways (docs/control-plane.md, "Replicas"):
//
//   - A Bus (PostgreSQL LISTEN/NOTIFY, internal/pgnotify) carries
//     wake-ups: the dispatcher's addPending, wakePending and stopTask tell
//     the other replicas through dispatcher.share, so a task created on
//     one replica wakes the long poll (or session) its agent holds on
//     another at once. The reaper's offline marks and the agents'
//     responder secrets travel the same way. The bus only makes things
//     sooner: a replica that missed a message still finds the work at its
//     next store look (a long poll's wait, a heartbeat).
//   - Background jobs that must run once per cluster (the reaper) run
//     only in the replica holding the leader lease in the database
//     (store.HoldLease, lease.go).

// Bus carries short messages between the replicas sharing a database.
// Publish must not block, and sends the messages of one call together
// (a run's wake-ups in one NOTIFY, not one after another); Run delivers
// the other replicas' messages (never this one's own) until ctx ends.
type Bus interface {
	Publish(msgs ...string)
	Run(ctx context.Context, deliver func(msgs []string)) error
}

// A DirectBus also addresses messages to one replica alone, for the store
// to send inside a transaction (store.CreateClaim.Notify): pgnotify's.
type DirectBus interface {
	Bus
	// Direct is the channel and the payloads that carry msgs to replica
	// alone, as that replica's Run delivers them.
	Direct(replica string, msgs []string) (channel string, payloads []string)
}

// Kinds of cluster message.
const (
	msgPending     = "pending"   // Agent has pending tasks: wake it
	msgWakePending = "wake"      // a node freed or an agent came online: wake agents with pending tasks
	msgStop        = "stop"      // Agent must stop Task
	msgOffline     = "offline"   // the leader marked Agent offline (its tasks failed): forget it
	msgSecret      = "secret"    // Agent's responder secret is Data (hex)
	msgWantSecret  = "want"      // a replica needs Agent's responder secret
	msgServe       = "serve"     // Agent (a destination) must start a server for Task: Data is the api.ServeRequest
	msgServed      = "served"    // Agent answered the server request of Task: Data is the api.Serving
	msgOffer       = "offer"     // Task, claimed at its creation, goes to its source Agent: Data is the api.AgentTask
	msgUnoffered   = "unoffered" // Task is still dispatched long after its claim: Data is the api.AgentTask (handout.go)
)

// clusterMsg is one message between replicas.
type clusterMsg struct {
	Kind  string `json:"k"`
	Agent string `json:"a,omitempty"`
	Task  string `json:"t,omitempty"`
	Data  string `json:"d,omitempty"`
}

// publish sends ms, together, to the other replicas (nothing without a
// bus).
func (s *Server) publish(ms ...clusterMsg) {
	if s.opts.Bus == nil || len(ms) == 0 {
		return
	}
	raw := make([]string, 0, len(ms))
	for _, m := range ms {
		if b, err := json.Marshal(m); err == nil {
			raw = append(raw, string(b))
		}
	}
	s.opts.Bus.Publish(raw...)
}

// runBus applies the other replicas' messages until ctx ends.
func (s *Server) runBus(ctx context.Context) {
	if s.opts.Bus == nil {
		return
	}
	_ = s.opts.Bus.Run(ctx, func(msgs []string) {
		for _, raw := range msgs {
			var m clusterMsg
			if err := json.Unmarshal([]byte(raw), &m); err != nil {
				s.log.Warn("unreadable cluster message", "err", err)
				continue
			}
			s.applyRemote(m)
		}
	})
}

// applyRemote does here what another replica's message asks.
func (s *Server) applyRemote(m clusterMsg) {
	switch m.Kind {
	case msgPending:
		s.disp.addPendingLocal(m.Agent)
	case msgWakePending:
		s.disp.wakePendingLocal()
	case msgStop:
		s.disp.stopTaskLocal(m.Agent, m.Task) // only if the agent is held here
	case msgServe:
		var req api.ServeRequest
		if json.Unmarshal([]byte(m.Data), &req) == nil {
			s.disp.serveLocal(m.Agent, req)
		}
	case msgServed:
		var sv api.Serving
		if json.Unmarshal([]byte(m.Data), &sv) == nil {
			s.disp.served(m.Task, m.Agent, sv.Port, sv.Error)
		}
	case msgOffer, msgUnoffered:
		s.applyOffer(m)
	case msgOffline:
		s.forgetAgent(m.Agent, "destination agent went offline before starting its server")
	case msgSecret:
		if secret, err := hex.DecodeString(m.Data); err == nil && len(secret) > 0 {
			s.keys.set(m.Agent, secret)
		}
	case msgWantSecret:
		// Answer only for an agent that beats here: its secret is fresh.
		if secret := s.keys.get(m.Agent); secret != nil && s.beats.online(m.Agent) {
			s.publish(clusterMsg{Kind: msgSecret, Agent: m.Agent, Data: hex.EncodeToString(secret)})
		}
	}
}

// forgetAgent drops what this replica holds for an agent marked offline
// (by this replica's reaper or, through the bus, another's).
func (s *Server) forgetAgent(uid, stagedReason string) {
	s.beats.offline(uid)
	s.disp.failStagedFor(uid, stagedReason)
	s.disp.forget(uid)
	s.keys.forget(uid)
	s.offers.forget(uid)
}

// shareSecret tells the other replicas an agent's responder secret when
// this replica learns a new one (the agent's first heartbeat here, or a
// restart), so a task whose destination beats elsewhere gets its test key.
func (s *Server) shareSecret(uid string, secret []byte, changed bool) {
	if changed {
		s.publish(clusterMsg{Kind: msgSecret, Agent: uid, Data: hex.EncodeToString(secret)})
	}
}

// Leader lease.

// Defaults of the leader lease.
const (
	// DefaultLeaseTTL is how long a hold lasts unless renewed; a replica
	// that dies is replaced as leader within this (plus a renewal period).
	DefaultLeaseTTL = 15 * time.Second
	// reaperLease names the lease of the reaper.
	reaperLease = "reaper"
)

// servedElsewhere passes a destination's answer to a server request that
// another replica made (its hand-off is held there) and reports whether
// there are other replicas to pass it to.
func (s *Server) servedElsewhere(taskID string, sv api.Serving) bool {
	if s.opts.Bus == nil {
		return false
	}
	b, err := json.Marshal(api.Serving{PodUID: sv.PodUID, Port: sv.Port, Error: sv.Error})
	if err != nil {
		return false
	}
	s.publish(clusterMsg{Kind: msgServed, Agent: sv.PodUID, Task: taskID, Data: string(b)})
	return true
}
