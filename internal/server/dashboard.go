package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/web"
)

// extras are the parts served beside the API: the dashboard at / and the
// Prometheus metrics at /metrics.
type extras struct {
	dash *web.Dashboard
	exp  *metrics.Exporter
}

// inprocess is a RoundTripper that serves requests with a handler in this
// process: the dashboard reads the API exactly as a client would, without
// a network hop.
type inprocess struct{ h http.Handler }

func (t inprocess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// inProcessClient is an API client with the user token that calls this
// server's handler directly.
func (s *Server) inProcessClient() (*client.Client, error) {
	return client.New("http://cnperf.internal", s.opts.UserToken,
		client.WithHTTPClient(&http.Client{Transport: inprocess{s.handler}, Timeout: client.DefaultTimeout}))
}

// Mesh returns a scheduler of the continuous RTT mesh that creates its
// rounds through this server's API; the caller runs it (Scheduler.Run)
// for as long as the server serves.
func (s *Server) Mesh(o mesh.Options) (*mesh.Scheduler, error) {
	c, err := s.inProcessClient()
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = s.log
	}
	if o.Leading == nil && s.opts.Bus != nil {
		o.Leading = s.Leader // one mesh per cluster of replicas
	}
	return mesh.New(c, o)
}

// scheduler returns the runner of the schedules in the store, which
// runs their suites through this server's API.
func (s *Server) scheduler() (*schedule.Scheduler, error) {
	c, err := s.inProcessClient()
	if err != nil {
		return nil, fmt.Errorf("schedules' API client: %w", err)
	}
	// Only the replica holding the leader lease looks for due schedules
	// (one query a second instead of one per replica); the store's claim
	// of each due time keeps a paused leader and its successor from both
	// starting one.
	return schedule.New(schedule.Options{Store: s.st, API: c, Suites: builtin.Registry(), Log: s.log, Now: s.now, Leader: s.Leader,
		Tick: s.opts.ScheduleTick, BeatEvery: s.opts.ScheduleBeat, StaleAfter: 9 * max(s.opts.ScheduleBeat, schedule.DefaultBeatEvery)})
}

// mountExtras registers /metrics (open, as Prometheus exporters are) and
// the dashboard's pages (login by the user token) on the server's mux.
func (s *Server) mountExtras() error {
	c, err := s.inProcessClient()
	if err != nil {
		return fmt.Errorf("dashboard's API client: %w", err)
	}
	// The one registry of suites: stored runs are shown with their suite's
	// own rows; suites that need a lab's network are refused by the start
	// form with the reason.
	dash, err := web.New(web.Options{API: c, UserToken: s.opts.UserToken, Suites: builtin.Registry(), Logger: s.log, Now: s.now,
		TokenPlaces: s.opts.TokenPlaces})
	if err != nil {
		return err
	}
	exp := metrics.New(s.st, metrics.Options{Logger: s.log, PairBudget: s.opts.MetricsPairBudget})
	s.extras = &extras{dash: dash, exp: exp}
	s.mux.Handle("GET /metrics", exp.Handler())
	dash.Register(s.mux)
	return nil
}

// CloseDashboard stops the suites started from the dashboard, cancelling
// their runs, and waits for them.
func (s *Server) CloseDashboard() {
	if s.extras != nil {
		s.extras.dash.Close()
	}
}
