package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// The agent API's report endpoints: storing a task's result.

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
	s.offers.ack(rep.PodUID, t.TaskID)
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
	jsonCall(s, true, api.MaxReportBody, s.reportByOwner, s.report)(w, r)
}

func (s *Server) handleReportV2(w http.ResponseWriter, r *http.Request) {
	check := func(r *http.Request, rep *api.Report) error {
		if err := reportMatchesPath(r, rep); err != nil {
			return err
		}
		return s.reportByOwner(r, rep)
	}
	jsonCall(s, false, api.MaxReportBody, check, s.report)(w, r)
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

// reportByOwner refuses a report by another agent than the task's source
// (403), before anything is stored.
func (s *Server) reportByOwner(r *http.Request, rep *api.Report) error {
	if rep.TaskID == "" {
		return api.BadRequest("task_id", "missing")
	}
	if err := checkLens(MaxUIDLen, "task_id", rep.TaskID, "pod_uid", rep.PodUID); err != nil {
		return err
	}
	return s.actForTask(r, rep.TaskID, rep.PodUID, false)
}
