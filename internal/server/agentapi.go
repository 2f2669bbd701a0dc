package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// claimLimit bounds how many tasks one fetch claims.
const claimLimit = 16

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
		if err := checkLen(fmt.Sprintf("running[%d]", i), id, MaxUIDLen); err != nil {
			return err
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
	if len(hb.Running) > 1000 {
		return api.BadRequest("running", "more than 1000 task ids")
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
		ResponderAddr: hb.ResponderAddr, Version: hb.Version, Status: store.AgentFree,
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
	reply := api.HeartbeatReply{AgentID: id, Cancel: s.disp.takeCancel(hb.PodUID)}
	// Tasks the agent runs that ended on the server (cancelled, timed out,
	// failed while the server restarted) are stopped too.
	for _, tid := range hb.Running {
		t, err := s.st.GetTask(ctx, tid)
		if err == nil && t.State.Terminal() && !contains(reply.Cancel, tid) {
			reply.Cancel = append(reply.Cancel, tid)
		}
	}
	return reply, nil
}

// ReasonAgentRestarted is the reason of tasks an agent lost by restarting.
const ReasonAgentRestarted = "agent restarted and lost the task"

// failLost fails the tasks the agent's previous process held: active
// tasks of this source dispatched up to the previous process's last
// heartbeat and not in the new process's running list. (Tasks dispatched
// later may be with the new process, its answer still on the way.)
func (s *Server) failLost(ctx context.Context, hb api.Heartbeat, since, now time.Time) {
	for _, state := range []store.TaskState{store.TaskDispatched, store.TaskRunning} {
		ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{AgentUID: hb.PodUID, State: state}, store.Page{Limit: store.MaxPageLimit})
		if err != nil {
			s.log.Warn("list tasks of a restarted agent", "pod_uid", hb.PodUID, "err", err)
			return
		}
		for _, t := range ts {
			if t.SrcPodUID != hb.PodUID || contains(hb.Running, t.TaskID) || t.DispatchedAt == nil || t.DispatchedAt.After(since) {
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

// jsonCall answers a request whose body decodes into In (at most limit
// bytes) with what fn makes of it, in the seed's envelope (v1) or as plain
// JSON (v2); check, when set, vets the decoded body against the request
// first.
func jsonCall[In, Out any](s *Server, v1 bool, limit int64, check func(*http.Request, *In) error, fn func(context.Context, In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if err := decode(w, r, limit, &in); err != nil {
			s.fail(w, r, v1, err)
			return
		}
		if check != nil {
			if err := check(r, &in); err != nil {
				s.fail(w, r, v1, err)
				return
			}
		}
		out, err := fn(r.Context(), in)
		if err != nil {
			s.fail(w, r, v1, err)
			return
		}
		if v1 {
			s.okV1(w, out)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) handleHeartbeatV1(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, true, api.MaxBody, nil, s.heartbeat)(w, r)
}

func (s *Server) handleHeartbeatV2(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, false, api.MaxBody, nil, s.heartbeat)(w, r)
}

// agentUID reads and checks the pod_uid query parameter.
func agentUID(r *http.Request) (string, error) {
	uid := r.URL.Query().Get("pod_uid")
	if uid == "" {
		return "", api.BadRequest("pod_uid", "missing query parameter")
	}
	if err := checkLen("pod_uid", uid, MaxUIDLen); err != nil {
		return "", err
	}
	return uid, nil
}

// knownAgent refuses a fetch by a uid that never sent a heartbeat, so
// made-up uids leave no state (wake-up channels, claims) on the server.
func (s *Server) knownAgent(ctx context.Context, uid string) error {
	if s.beats.online(uid) {
		return nil
	}
	if _, err := s.st.GetAgent(ctx, uid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &api.Error{Status: http.StatusNotFound, Field: "pod_uid", Message: fmt.Sprintf("unknown agent %q: send a heartbeat first", uid)}
		}
		return fmt.Errorf("look up agent %s: %w", uid, err)
	}
	return nil
}

// claim claims the agent's ready tasks. iperf and iperf3 tasks are held
// back until their destination has started the server.
func (s *Server) claim(ctx context.Context, uid string) ([]api.AgentTask, error) {
	now := s.now()
	ts, err := s.st.ClaimTasks(ctx, uid, now, claimLimit, s.opts.Grace)
	if err != nil {
		return nil, fmt.Errorf("claim tasks of %s: %w", uid, err)
	}
	if len(ts) == 0 && s.disp.hasPending(uid) {
		// Nothing claimable: forget the hint if nothing is pending at all.
		// (A task held back by exclusivity keeps the agent in the set.)
		_, n, err := s.st.ListTasks(ctx, store.TaskFilter{AgentUID: uid, State: store.TaskPending}, store.Page{Limit: 1})
		if err == nil && n == 0 {
			s.disp.clearPending(uid)
		}
	}
	out := make([]api.AgentTask, 0, len(ts))
	for _, t := range ts {
		at := agentTask(t)
		if t.Type == api.TypeIperf || t.Type == api.TypeIperf3 {
			expires := now.Add(t.Timeout + s.opts.Grace)
			s.disp.stage(at, uid, api.ServeRequest{
				TaskID: t.TaskID, Tool: t.Type, UDP: t.Type == api.TypeIperf && hasFlag(t.Param, "-u", "--udp"),
				Bind: t.DstPodIP, TimeoutS: (t.Timeout + s.opts.Grace).Seconds(),
			}, expires)
			s.log.Info("task waits for its destination's server", "task_id", t.TaskID, "dst", t.DstPodUID, "tool", t.Type)
			continue
		}
		out = append(out, at)
	}
	return out, nil
}

// hasFlag reports whether a task_param holds one of the flags.
func hasFlag(param string, flags ...string) bool {
	for _, f := range strings.Fields(param) {
		for _, want := range flags {
			if f == want {
				return true
			}
		}
	}
	return false
}

func agentTask(t store.Task) api.AgentTask {
	at := api.AgentTask{
		TaskID: t.TaskID, RunID: t.RunID, Type: t.Type, Param: t.Param,
		SrcPodIP: t.SrcPodIP, DstPodUID: t.DstPodUID, DstPodIP: t.DstPodIP,
		TimeoutS: t.Timeout.Seconds(),
	}
	if t.Deadline != nil {
		at.Deadline = *t.Deadline
	}
	if len(t.Spec) > 0 {
		var sp probe.Spec
		if err := json.Unmarshal(t.Spec, &sp); err == nil {
			at.Spec = &sp
		}
		at.QoS = storedQoS(t.Spec)
	}
	return at
}

// parseWait reads ?wait= (a duration or seconds), capped at MaxWait.
func (s *Server) parseWait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		var secs float64
		if _, err2 := fmt.Sscanf(v, "%g", &secs); err2 != nil {
			return 0, api.BadRequest("wait", "%q: want a duration like 30s", v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, api.BadRequest("wait", "must not be negative")
	}
	return min(d, s.opts.MaxWait), nil
}

// handleFetch is the agent's long poll: it answers as soon as tasks, server
// requests or cancellations are waiting for the agent, or after wait.
func (s *Server) handleFetch(w http.ResponseWriter, r *http.Request) {
	uid, err := agentUID(r)
	if err == nil {
		err = s.knownAgent(r.Context(), uid)
	}
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	wait, err := s.parseWait(r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	ctx := r.Context()
	wake := s.disp.ch(uid)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		// Drain the wake-up first, so one sent while we claim is kept.
		select {
		case <-wake:
		default:
		}
		claimed, err := s.claim(ctx, uid)
		if err != nil {
			s.fail(w, r, false, err)
			return
		}
		tasks, serve, cancel := s.disp.mail(uid)
		tasks = append(claimed, tasks...)
		if len(tasks) > 0 || len(serve) > 0 || len(cancel) > 0 || wait == 0 {
			if tasks == nil {
				tasks = []api.AgentTask{}
			}
			writeJSON(w, http.StatusOK, api.FetchReply{Tasks: tasks, Serve: serve, Cancel: cancel})
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			wait = 0 // one last look, then answer
		case <-ctx.Done():
			return
		}
	}
}

// handleGetTasksV1 is the seed's get_tasks: claims and returns the agent's
// tasks at once, in the v1 task shape. (No iperf server hand-off: a seed
// client starts its own servers.)
func (s *Server) handleGetTasksV1(w http.ResponseWriter, r *http.Request) {
	uid, err := agentUID(r)
	if err == nil {
		err = s.knownAgent(r.Context(), uid)
	}
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	ts, err := s.st.ClaimTasks(r.Context(), uid, s.now(), claimLimit, s.opts.Grace)
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	out := make([]api.Task, 0, len(ts))
	for _, t := range ts {
		out = append(out, taskV1(t))
	}
	s.okV1(w, out)
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	start := func(ctx context.Context, req api.StartRequest) (api.TaskV2, error) {
		t, err := s.st.MarkRunning(ctx, r.PathValue("id"), req.PodUID, s.now())
		if err != nil {
			return api.TaskV2{}, err
		}
		return taskV2(t), nil
	}
	jsonCall(s, false, api.MaxBody, startNamesAgent, start)(w, r)
}

// startNamesAgent refuses a start request without the agent's pod uid.
func startNamesAgent(_ *http.Request, req *api.StartRequest) error {
	if req.PodUID == "" {
		return api.BadRequest("pod_uid", "missing")
	}
	return checkLen("pod_uid", req.PodUID, MaxUIDLen)
}

func (s *Server) handleServing(w http.ResponseWriter, r *http.Request) {
	var req api.Serving
	if err := decode(w, r, api.MaxBody, &req); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if req.PodUID == "" {
		s.fail(w, r, false, api.BadRequest("pod_uid", "missing"))
		return
	}
	if err := checkLens(MaxUIDLen, "pod_uid", req.PodUID); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if err := checkLens(MaxTextLen, "error", req.Error); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if req.Error == "" && (req.Port < 1 || req.Port > 65535) {
		s.fail(w, r, false, api.BadRequest("port", "%d: want 1-65535", req.Port))
		return
	}
	id := r.PathValue("id")
	if !s.disp.served(id, req.PodUID, req.Port, req.Error) {
		s.fail(w, r, false, &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no server hand-off waiting for task %s at agent %s", id, req.PodUID)})
		return
	}
	s.log.Info("destination server ready", "task_id", id, "dst", req.PodUID, "port", req.Port, "err", req.Error)
	w.WriteHeader(http.StatusNoContent)
}

// report stores an agent's result.
func (s *Server) report(ctx context.Context, rep api.Report) (api.ReportReply, error) {
	if rep.TaskID == "" {
		return api.ReportReply{}, api.BadRequest("task_id", "missing")
	}
	if rep.PodUID == "" {
		return api.ReportReply{}, api.BadRequest("pod_uid", "missing")
	}
	if err := checkLens(MaxUIDLen, "task_id", rep.TaskID, "pod_uid", rep.PodUID, "report_id", rep.ReportID); err != nil {
		return api.ReportReply{}, err
	}
	if err := checkLens(MaxTextLen, "reason", rep.Reason, "state", rep.State); err != nil {
		return api.ReportReply{}, err
	}
	state := rep.State
	if state == "" && rep.TaskStatus != 0 {
		st, ok := api.StateOfTaskStatus(rep.TaskStatus)
		if !ok {
			return api.ReportReply{}, api.BadRequest("task_status", "%d is not a final status (want 3 finished, 4 failed, 5 timed out or 6 cancelled)", rep.TaskStatus)
		}
		state = st
	}
	if !api.TerminalState(state) {
		return api.ReportReply{}, api.BadRequest("state", "%q is not a final state (want succeeded, failed, timed_out or cancelled)", state)
	}
	if rep.ReportID == "" {
		// A v1 client without idempotency keys: the same task and state
		// count as the same report.
		rep.ReportID = "v1:" + rep.TaskID + ":" + state
	}
	if len(rep.Result) > 0 && !json.Valid(rep.Result) {
		return api.ReportReply{}, api.BadRequest("result", "not valid JSON")
	}
	t, dup, err := s.st.Complete(ctx, store.Report{
		TaskID: rep.TaskID, AgentUID: rep.PodUID, ReportID: rep.ReportID, State: store.TaskState(state),
		RawResult: rep.TaskResult, Result: rep.Result, Reason: rep.Reason,
	}, s.now())
	if err != nil {
		return api.ReportReply{}, err
	}
	if !dup {
		s.log.Info("task finished", "task_id", t.TaskID, "run_id", t.RunID, "state", t.State, "reason", t.Reason)
		s.disp.dropStaged(t.TaskID)
		if t.Exclusive {
			s.disp.wakePending()
		}
	}
	return api.ReportReply{TaskID: t.TaskID, State: string(t.State), Duplicate: dup}, nil
}

func (s *Server) handleReportV1(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, true, api.MaxReportBody, nil, s.report)(w, r)
}

func (s *Server) handleReportV2(w http.ResponseWriter, r *http.Request) {
	jsonCall(s, false, api.MaxReportBody, reportMatchesPath, s.report)(w, r)
}

// reportMatchesPath takes the task id from the path when the body has none
// and refuses a body that names another task.
func reportMatchesPath(r *http.Request, rep *api.Report) error {
	if id := r.PathValue("id"); rep.TaskID == "" {
		rep.TaskID = id
	} else if rep.TaskID != id {
		return api.BadRequest("task_id", "%q differs from the task id in the path %q", rep.TaskID, id)
	}
	return nil
}
