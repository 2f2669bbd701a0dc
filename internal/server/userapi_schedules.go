package server

import (
	"context"
	"net/http"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// The user API's schedule endpoints (v2): create, list, get, history,
// delete. The server runs them itself (Run starts a schedule.Scheduler).

// scheduleRunsListed is how many of a schedule's latest runs a listing
// or a get shows.
const scheduleRunsListed = 5

func (s *Server) handleScheduleCreate(w http.ResponseWriter, r *http.Request) {
	var sc api.ScheduleCreate
	if err := decode(w, r, api.MaxBody, &sc); err != nil {
		s.fail(w, r, false, err)
		return
	}
	prepared, err := schedule.Prepare(builtin.Registry(), sc, s.opts.ScheduleMinEvery)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	created, err := s.st.CreateSchedule(r.Context(), prepared, s.now())
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	s.log.Info("schedule created", "schedule", created.ID, "suite", created.Suite, "every", created.Every)
	writeJSON(w, http.StatusCreated, schedule.APISchedule(created, nil, false))
}

// scheduleWithRuns answers sc with its latest runs.
func (s *Server) scheduleWithRuns(ctx context.Context, sc store.Schedule) (api.Schedule, error) {
	runs, err := s.st.ListScheduleRuns(ctx, store.ScheduleRunFilter{ScheduleID: sc.ID, Limit: scheduleRunsListed})
	if err != nil {
		return api.Schedule{}, err
	}
	return schedule.APISchedule(sc, runs, false), nil
}

func (s *Server) handleScheduleList(w http.ResponseWriter, r *http.Request) {
	scs, err := s.st.ListSchedules(r.Context())
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := make([]api.Schedule, 0, len(scs))
	for _, sc := range scs {
		a, err := s.scheduleWithRuns(r.Context(), sc)
		if err != nil {
			s.fail(w, r, false, err)
			return
		}
		out = append(out, a)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleScheduleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sc, err := s.st.GetSchedule(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "schedule "+id))
		return
	}
	a, err := s.scheduleWithRuns(r.Context(), sc)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// handleScheduleRuns answers a schedule's history, newest first, with the
// summaries' rows (?limit=, default 100).
func (s *Server) handleScheduleRuns(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := pageOf(r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	if _, err := s.st.GetSchedule(r.Context(), id); err != nil {
		s.fail(w, r, false, wrapNotFound(err, "schedule "+id))
		return
	}
	runs, err := s.st.ListScheduleRuns(r.Context(), store.ScheduleRunFilter{ScheduleID: id, Limit: p.Limit})
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := make([]api.ScheduleRun, 0, len(runs))
	for _, run := range runs {
		out = append(out, schedule.APIRun(run, true))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleScheduleDelete deletes a schedule and its history; the runs it
// made stay. A run of it still going stops at its next beat: the server
// running it finds its record gone and cancels the run.
func (s *Server) handleScheduleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sc, err := s.st.DeleteSchedule(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "schedule "+id))
		return
	}
	s.log.Info("schedule deleted", "schedule", id)
	writeJSON(w, http.StatusOK, schedule.APISchedule(sc, nil, false))
}
