package server

import (
	"bytes"
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
	rep.Result, rep.TaskResult = splitRaw(rep.Result, rep.TaskResult)
	t, dup, err := s.st.Complete(ctx, store.Report{
		TaskID: rep.TaskID, AgentUID: rep.PodUID, ReportID: rep.ReportID, State: store.TaskState(state),
		RawResult: rep.TaskResult, Result: rep.Result, Reason: rep.Reason,
	}, s.now())
	if err != nil {
		return api.ReportReply{}, err
	}
	s.offers.ack(rep.PodUID, t.TaskID)
	if !dup && t.ReportID != rep.ReportID {
		// Only the agent's acknowledgement of a task ended before: no
		// result stored, so the reply says duplicate.
		s.log.Info("task stop acknowledged", "task_id", t.TaskID, "run_id", t.RunID, "state", t.State, "agent_reason", t.StopReason)
		dup = true
	} else if !dup {
		if t.LateReason != "" {
			s.log.Info("late result stored", "task_id", t.TaskID, "run_id", t.RunID, "state", t.State, "ended_before_for", t.LateReason)
		} else {
			s.log.Info("task finished", "task_id", t.TaskID, "run_id", t.RunID, "state", t.State, "reason", t.Reason)
		}
		s.disp.dropStaged(t.TaskID)
		if t.Exclusive {
			s.disp.wakePending()
		}
		s.recordCoverage(ctx, t)
	}
	return api.ReportReply{TaskID: t.TaskID, State: string(t.State), Duplicate: dup}, nil
}

// splitRaw takes a tool's output out of a typed result ("raw"), so the
// typed result stays small: the output is kept as the task's raw output
// (stored apart) unless the report carries one already (agents send the
// same text in both).
func splitRaw(result json.RawMessage, raw string) (json.RawMessage, string) {
	if !bytes.Contains(result, []byte(`"raw"`)) {
		return result, raw
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(result, &m) != nil {
		return result, raw // not an object: kept as it is
	}
	inner, ok := m["raw"]
	if !ok {
		return result, raw
	}
	var s string
	if json.Unmarshal(inner, &s) != nil {
		return result, raw
	}
	delete(m, "raw")
	out, err := json.Marshal(m)
	if err != nil {
		return result, raw
	}
	if raw == "" {
		raw = s
	}
	return out, raw
}

func (s *Server) handleReportV1(w http.ResponseWriter, r *http.Request) {
	s.gateBigReport(w, r, jsonCall(s, true, api.MaxReportBody, s.reportByOwner, s.report))
}

func (s *Server) handleReportV2(w http.ResponseWriter, r *http.Request) {
	check := func(r *http.Request, rep *api.Report) error {
		if err := reportMatchesPath(r, rep); err != nil {
			return err
		}
		return s.reportByOwner(r, rep)
	}
	s.gateBigReport(w, r, jsonCall(s, false, api.MaxReportBody, check, s.report))
}

// Reports of 1 MiB or more (or of unknown length) are read, decoded and
// stored at most bigReportSlots at a time: each costs about three times
// its size in memory while it is handled (body, decoded text, the
// database's copy), so without a bound a thousand agents reporting 8 MB
// outputs at once would need gigabytes. The others wait (their bodies
// unread) for a slot or for their request to end; agents retry with the
// same report id, so nothing is stored twice.
const (
	bigReportBody  = 1 << 20
	bigReportSlots = 2
)

func (s *Server) gateBigReport(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if r.ContentLength >= 0 && r.ContentLength < bigReportBody {
		h(w, r)
		return
	}
	select {
	case s.bigReports <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-s.bigReports }()
	h(w, r)
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
