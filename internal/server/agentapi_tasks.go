package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// The agent API's task endpoints: the long poll (and the seed's get_tasks)
// that hand an agent its tasks, and the start and server hand-off calls.

// claimLimit bounds how many tasks one fetch claims.
const claimLimit = 16

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
		err = s.actFor(r, uid)
	}
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
			s.giveTestKeys(ctx, tasks)
			if tasks == nil {
				tasks = []api.AgentTask{}
			}
			s.offers.handed(uid, tasks, s.now())
			if a := s.sessions.get(uid); a != nil && len(tasks) > 0 {
				// The agent moved to its session and may have dropped
				// this poll: the session looks at the offer once due.
				s.scheduleReoffer(a)
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
		err = s.actFor(r, uid)
	}
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
		out = append(out, taskV1(t, ""))
	}
	s.okV1(w, out)
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	start := func(ctx context.Context, req api.StartRequest) (api.TaskV2, error) {
		return s.start(ctx, r.PathValue("id"), req.PodUID)
	}
	jsonCall(s, false, api.MaxBody, s.startByOwner, start)(w, r)
}

// start marks the task running (its offer acknowledged), for its source
// agent uid alone: the store's update finds no task of uid's by that id
// when the task is another agent's, and only then is the task read
// (ownTask), to answer that start 403 rather than 404. A start is on the
// path of every task of a round, and a read before the update was a
// round trip more for each.
func (s *Server) start(ctx context.Context, id, uid string) (api.TaskV2, error) {
	t, err := s.st.MarkRunning(ctx, id, uid, s.now())
	if errors.Is(err, store.ErrNotFound) {
		if oerr := s.ownTask(ctx, id, uid, false); oerr != nil {
			return api.TaskV2{}, oerr
		}
	}
	if err != nil {
		return api.TaskV2{}, err
	}
	s.offers.ack(uid, t.TaskID)
	return taskV2(t), nil
}

// startByOwner refuses a start request without the agent's pod uid, or
// by a caller that cannot act for that agent (403); start refuses
// another agent's task (403).
func (s *Server) startByOwner(r *http.Request, req *api.StartRequest) error {
	if req.PodUID == "" {
		return api.BadRequest("pod_uid", "missing")
	}
	if err := checkLen("pod_uid", req.PodUID, MaxUIDLen); err != nil {
		return err
	}
	return s.actFor(r, req.PodUID)
}

func (s *Server) handleServing(w http.ResponseWriter, r *http.Request) {
	var req api.Serving
	if err := decode(w, r, api.MaxBody, &req); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if err := s.serving(r, r.PathValue("id"), req); err != nil {
		s.fail(w, r, false, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// serving checks a destination's answer to a server request (by the
// request's caller) and hands the task to its source.
func (s *Server) serving(r *http.Request, id string, req api.Serving) error {
	if req.PodUID == "" {
		return api.BadRequest("pod_uid", "missing")
	}
	if err := checkLens(MaxUIDLen, "pod_uid", req.PodUID); err != nil {
		return err
	}
	if err := checkLens(MaxTextLen, "error", req.Error); err != nil {
		return err
	}
	if req.Error == "" && (req.Port < 1 || req.Port > 65535) {
		return api.BadRequest("port", "%d: want 1-65535", req.Port)
	}
	if err := s.actForTask(r, id, req.PodUID, true); err != nil {
		return err
	}
	if !s.disp.served(id, req.PodUID, req.Port, req.Error) && !s.servedElsewhere(id, req) {
		return &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no server hand-off waiting for task %s at agent %s", id, req.PodUID)}
	}
	s.log.Info("destination server ready", "task_id", id, "dst", req.PodUID, "port", req.Port, "err", req.Error)
	return nil
}
