package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// The user API's run endpoints (v2): create, list, get, cancel.

func (s *Server) handleRunCreate(w http.ResponseWriter, r *http.Request) {
	var rc api.RunCreate
	if err := decode(w, r, api.MaxBody, &rc); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if len(rc.Tasks) == 0 {
		s.fail(w, r, false, api.BadRequest("tasks", "empty: a run needs at least one task"))
		return
	}
	if err := s.opts.Limits.checkRunCreate(rc); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if rc.Suite == "" {
		rc.Suite = "tasks"
	}
	ix, err := s.agentIndex(r.Context())
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	refs := make([]string, 0, 2*len(rc.Tasks))
	for _, rt := range rc.Tasks {
		refs = append(refs, rt.Src, rt.Dst)
	}
	// The count of runs in flight and the endpoints' read are two round
	// trips on every task's dispatch latency: they go side by side.
	inFlight := make(chan error, 1)
	go func() { inFlight <- s.checkRunsInFlight(r.Context()) }()
	err = ix.prefetch(refs)
	if ferr := <-inFlight; ferr != nil {
		err = ferr // over the limit is the answer, whatever the read found
	}
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	ts := make([]store.Task, 0, len(rc.Tasks))
	for i, rt := range rc.Tasks {
		t, err := s.v2Task(fmt.Sprintf("tasks[%d].", i), rt, ix)
		if err != nil {
			s.fail(w, r, false, err)
			return
		}
		ts = append(ts, t)
	}
	claim := s.createClaim()
	claim.Agents = ix.fetched
	sent := s.directOffers(&claim)
	run, created, err := s.st.CreateRunAndClaim(r.Context(), store.Run{Suite: rc.Suite, Params: rc.Params, AllowConcurrency: rc.AllowConcurrency}, ts, s.now(), claim)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	s.handOut(created, sent)
	s.log.Info("run created", "run_id", run.ID, "tasks", len(created), "dispatched", run.Counts[store.TaskDispatched])
	writeJSON(w, http.StatusCreated, runV2(run, created))
}

func (s *Server) handleRunList(w http.ResponseWriter, r *http.Request) {
	p, err := pageOf(r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	f := store.RunFilter{State: store.RunState(r.URL.Query().Get("state")), Suite: r.URL.Query().Get("suite")}
	if f.State != "" && !f.State.Valid() {
		s.fail(w, r, false, api.BadRequest("state", "unknown run state %q", f.State))
		return
	}
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.fail(w, r, false, api.BadRequest("since", "%q is not an RFC 3339 time (2026-11-23T21:00:00Z)", v))
			return
		}
		f.CreatedSince = t
	}
	runs, _, err := s.st.ListRuns(r.Context(), f, p)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := api.RunPage{Runs: make([]api.Run, 0, len(runs))}
	for _, run := range runs {
		out.Runs = append(out.Runs, runV2(run, nil))
	}
	if pageFull(p, len(runs)) {
		out.NextAfter = strconv.FormatInt(runs[len(runs)-1].Seq, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

// runTasks lists every task of a run.
func (s *Server) runTasks(ctx context.Context, id string) ([]store.Task, error) {
	var all []store.Task
	var after int64
	for {
		ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{RunID: id}, store.Page{Limit: store.MaxPageLimit, AfterID: after})
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
		if len(ts) < store.MaxPageLimit {
			return all, nil
		}
		after = ts[len(ts)-1].ID
	}
}

// handleRunGet answers a run with its counts and one page of its tasks
// (?limit=, default the most, 1000, so a client that does not page reads
// runs of up to 1000 tasks whole; ?after=). Tasks carry no raw output, so
// an answer stays bounded by the page whatever the tools printed.
func (s *Server) handleRunGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := pageOf(r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	if p.Limit == 0 {
		p.Limit = store.MaxPageLimit
	}
	run, err := s.st.GetRun(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "run "+id))
		return
	}
	ts, _, err := s.st.ListTasks(r.Context(), store.TaskFilter{RunID: id}, p)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := runV2(run, ts)
	if pageFull(p, len(ts)) {
		out.TasksNextAfter = ts[len(ts)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleRunCancel(w http.ResponseWriter, r *http.Request) {
	reason, err := s.cancelReason(w, r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	id := r.PathValue("id")
	// Remember the active tasks to tell their agents to stop.
	before, err := s.runTasks(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	run, err := s.st.CancelRun(r.Context(), id, reason, s.now())
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "run "+id))
		return
	}
	for _, t := range before {
		if t.State.Active() {
			s.disp.stopTask(t.SrcPodUID, t.TaskID)
		}
		s.disp.dropStaged(t.TaskID)
	}
	s.disp.wakePending()
	ts, err := s.runTasks(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	writeJSON(w, http.StatusOK, runV2(run, ts))
}
