package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// The agent API's heartbeat: checking and recording it, and failing the
// tasks an agent lost by restarting.

func validateHeartbeat(hb api.Heartbeat) error {
	if strings.TrimSpace(hb.PodUID) == "" {
		return api.BadRequest("pod_uid", "missing")
	}
	if err := checkLens(MaxUIDLen, "pod_uid", hb.PodUID, "boot_id", hb.BootID); err != nil {
		return err
	}
	if err := checkLens(MaxNameLen, "pod_name", hb.PodName, "pod_namespace", hb.PodNamespace, "node_name", hb.NodeName,
		"pod_ip", hb.PodIP, "node_ip", hb.NodeIP, "responder_addr", hb.ResponderAddr, "version", hb.Version); err != nil {
		return err
	}
	for i, id := range hb.Running {
		if len(id) > MaxUIDLen { // name the field only when refusing: this runs on every heartbeat
			return checkLen(fmt.Sprintf("running[%d]", i), id, MaxUIDLen)
		}
	}
	for i, id := range hb.Undelivered {
		if len(id) > MaxUIDLen {
			return checkLen(fmt.Sprintf("undelivered[%d]", i), id, MaxUIDLen)
		}
	}
	if hb.PodName == "" {
		return api.BadRequest("pod_name", "missing")
	}
	if net.ParseIP(hb.PodIP) == nil {
		return api.BadRequest("pod_ip", "%q is not an IP address", hb.PodIP)
	}
	if hb.NodeIP != "" && net.ParseIP(hb.NodeIP) == nil {
		return api.BadRequest("node_ip", "%q is not an IP address", hb.NodeIP)
	}
	if hb.ResponderAddr != "" {
		if _, _, err := net.SplitHostPort(hb.ResponderAddr); err != nil {
			return api.BadRequest("responder_addr", "want HOST:PORT: %v", err)
		}
	}
	if hb.ResponderKey != "" {
		if _, err := probe.ParseResponderSecret(hb.ResponderKey); err != nil {
			return api.BadRequest("responder_key", "%v", err)
		}
	}
	if len(hb.Running) > 1000 {
		return api.BadRequest("running", "more than 1000 task ids")
	}
	if len(hb.Undelivered) > 1000 {
		return api.BadRequest("undelivered", "more than 1000 task ids")
	}
	if len(hb.NodeLabels) > api.MaxNodeLabels {
		return api.BadRequest("node_labels", "%d labels: at most %d", len(hb.NodeLabels), api.MaxNodeLabels)
	}
	for k, v := range hb.NodeLabels {
		// Kubernetes' bounds: a key is a prefix (a DNS name) and a name of
		// 63; a value 63.
		if k == "" || len(k) > MaxNameLen+64 || len(v) > 63 {
			return api.BadRequest("node_labels", "label %.80q=%.80q: want a non-empty key of at most %d bytes and a value of at most 63", k, v, MaxNameLen+64)
		}
	}
	return nil
}

// heartbeat records one heartbeat and returns the reply.
func (s *Server) heartbeat(ctx context.Context, hb api.Heartbeat) (api.HeartbeatReply, error) {
	if err := validateHeartbeat(hb); err != nil {
		return api.HeartbeatReply{}, err
	}
	now := s.now()
	a := store.Agent{
		PodUID: hb.PodUID, PodName: hb.PodName, PodNamespace: hb.PodNamespace, PodIP: hb.PodIP,
		NodeName: hb.NodeName, NodeIP: hb.NodeIP, HostNetwork: hb.HostNetwork,
		ResponderAddr: hb.ResponderAddr, Version: hb.Version, NodeLabels: hb.NodeLabels, Status: store.AgentFree,
	}
	if len(hb.Running) > 0 {
		a.Status = store.AgentBusy
	}
	id, ok := s.beats.touch(a, now)
	if !ok && s.beats.full(a.PodUID, s.opts.Limits.MaxAgents) {
		return api.HeartbeatReply{}, overLimit("pod_uid", "the server holds %d agents, its limit (--max-agents): agent %s is not registered", s.opts.Limits.MaxAgents, hb.PodUID)
	}
	if !ok {
		stored, err := s.reg.register(ctx, a, now)
		if err != nil {
			return api.HeartbeatReply{}, fmt.Errorf("record heartbeat of %s: %w", hb.PodUID, err)
		}
		s.beats.stored(stored, now)
		id = stored.ID
		s.log.Info("agent online", "pod_uid", stored.PodUID, "pod", stored.PodName, "node", stored.NodeName, "ip", stored.PodIP)
		// A destination came online: held-back tasks may be claimable.
		s.disp.wakePending()
	}
	if restarted, since := s.beats.boot(hb.PodUID, hb.BootID); restarted {
		s.failLost(ctx, hb, since, now)
	}
	if secret, err := probe.ParseResponderSecret(hb.ResponderKey); err == nil {
		s.shareSecret(hb.PodUID, secret, s.keys.set(hb.PodUID, secret))
	}
	reply := api.HeartbeatReply{AgentID: id, Cancel: s.disp.takeCancel(hb.PodUID)}
	// Tasks the agent runs that ended on the server (cancelled, timed out,
	// failed while the server restarted) are stopped too.
	for _, tid := range hb.Running {
		t, err := s.st.GetTask(ctx, tid)
		if err == nil && t.State.Terminal() && !contains(reply.Cancel, tid) {
			reply.Cancel = append(reply.Cancel, tid)
		}
	}
	s.reoffer(ctx, hb, now)
	return reply, nil
}

// ReasonAgentRestarted is the reason of tasks an agent lost by restarting.
const ReasonAgentRestarted = "agent restarted and lost the task"

// failLost fails the tasks the agent's previous process held: active
// tasks of this source dispatched up to the previous process's last
// heartbeat and not in the new process's running or undelivered lists (a
// result kept in the agent's disk outbox is on its way). (Tasks dispatched
// later may be with the new process, its answer still on the way.)
func (s *Server) failLost(ctx context.Context, hb api.Heartbeat, since, now time.Time) {
	for _, state := range []store.TaskState{store.TaskDispatched, store.TaskRunning} {
		ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{AgentUID: hb.PodUID, State: state}, store.Page{Limit: store.MaxPageLimit})
		if err != nil {
			s.log.Warn("list tasks of a restarted agent", "pod_uid", hb.PodUID, "err", err)
			return
		}
		for _, t := range ts {
			if t.SrcPodUID != hb.PodUID || contains(hb.Running, t.TaskID) || contains(hb.Undelivered, t.TaskID) || t.DispatchedAt == nil || t.DispatchedAt.After(since) {
				continue
			}
			done, dup, err := s.st.Complete(ctx, store.Report{TaskID: t.TaskID, AgentUID: hb.PodUID, ReportID: "server:lost:" + hb.BootID,
				State: store.TaskFailed, Reason: ReasonAgentRestarted}, now)
			if err != nil || dup {
				continue // it ended meanwhile
			}
			s.disp.dropStaged(done.TaskID)
			s.log.Warn("task failed", "task_id", done.TaskID, "run_id", done.RunID, "reason", done.Reason)
			if done.Exclusive {
				s.disp.wakePending()
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) handleHeartbeatV1(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, true, api.MaxBody, s.heartbeatFromCaller, s.heartbeat)(w, r)
}

func (s *Server) handleHeartbeatV2(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, false, api.MaxBody, s.heartbeatFromCaller, s.heartbeat)(w, r)
}

// heartbeatFromCaller refuses a heartbeat for another agent than the
// caller (403).
func (s *Server) heartbeatFromCaller(r *http.Request, hb *api.Heartbeat) error {
	if err := checkLen("pod_uid", hb.PodUID, MaxUIDLen); err != nil {
		return err
	}
	if err := s.actFor(r, hb.PodUID); err != nil {
		return err
	}
	if c := callerOf(r); c.podName != "" && hb.PodName != c.podName {
		return forbidden("pod_name", "this %s is bound to pod %q, not %q", c.via, c.podName, hb.PodName)
	}
	return s.ownAddrs(r, hb)
}

// ownAddrs checks that an agent advertises only its own addresses: its
// responder listens on its pod_ip or node_ip (other agents' tests are
// sent there, and their errors would otherwise probe any host:port for
// whoever holds an agent's identity), and, with AgentSourceCheck, the
// heartbeat comes from one of the two.
func (s *Server) ownAddrs(r *http.Request, hb *api.Heartbeat) error {
	if hb.ResponderAddr != "" {
		host, _, err := net.SplitHostPort(hb.ResponderAddr)
		if err != nil {
			return api.BadRequest("responder_addr", "want HOST:PORT: %v", err)
		}
		if !sameIP(host, hb.PodIP) && !sameIP(host, hb.NodeIP) {
			return api.BadRequest("responder_addr", "%s is neither the agent's pod_ip (%s) nor its node_ip (%s): a responder listens on the agent's own address", hb.ResponderAddr, hb.PodIP, hb.NodeIP)
		}
	}
	if !s.opts.AgentSourceCheck {
		return nil
	}
	src, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		src = r.RemoteAddr
	}
	if !sameIP(src, hb.PodIP) && !sameIP(src, hb.NodeIP) {
		return forbidden("pod_ip", "the heartbeat came from %s, which is neither its pod_ip (%s) nor its node_ip (%s): an agent advertises only its own addresses (a server whose agents reach it through NAT or a proxy runs with --trust-agent-addrs)", src, hb.PodIP, hb.NodeIP)
	}
	return nil
}

// sameIP reports whether a and b are one IP address (IPv4-mapped IPv6
// and IPv4 alike); an empty or unparsable one is no match.
func sameIP(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	return err1 == nil && err2 == nil && x.Unmap().WithZone("") == y.Unmap().WithZone("")
}
