// Package server is cnperf's control-plane HTTP server: the seed-compatible
// v1 API, the structured v2 API, bearer-token authentication, long-poll task
// dispatch, the reaper of silent agents and expired deadlines, and the
// OpenAPI document. Its state lives in a store.Store; what it keeps in
// memory (latest heartbeat times, long-poll waiters, iperf server
// hand-offs) is a cache or a rendezvous that the store and the agents'
// retries make good after a restart.
//
// Heartbeats: a heartbeat from a known online agent whose identity did not
// change only updates an in-memory time; a flusher writes those times to
// the store in one transaction per second (TouchAgents; an agent's time is
// written when it lags by a few seconds, see persistEvery), and the reaper
// flushes before it looks for silent agents; the agent lists show the
// in-memory times. New agents, changed
// identities and agents coming back online are written at once. The
// trade-off: a crash loses at most a few seconds of heartbeat times (agents
// beat again within a second), in exchange for one write transaction per
// second, touching each agent's row every few seconds, instead of one
// write per heartbeat. An agent holding a session is written only when its
// session opens and ends: its row names this replica's presence lease
// meanwhile, and the reaper leaves it online while the lease lives
// (presence.go).
//
// iperf and iperf3 tasks: the destination must run the tool's server. When
// the source agent's fetch claims such a task, the server holds it back and
// asks the destination agent (through its own fetch answer) to start the
// server; the destination answers POST .../serving with the port, and only
// then is the task handed to the source with that port. If the destination
// cannot start it, or goes offline, the source gets the task with
// ServeError and reports it failed. A hand-off in flight when the server
// restarts ends timed out at the task's deadline.
package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/web"
)

// Defaults of Options.
const (
	DefaultReapEvery     = 3 * time.Second
	DefaultOfflineAfter  = 10 * time.Second
	DefaultFlushEvery    = time.Second
	DefaultMaxWait       = 30 * time.Second
	DefaultGrace         = 15 * time.Second
	DefaultProbeOverhead = 30 * time.Second
)

// Options configure a Server. Store, the user token and a way to
// authenticate agents (AgentToken, AgentReviewer or both) are required.
type Options struct {
	Store store.Store
	// UserToken authorises the external (user) endpoints. AgentToken is
	// the agents' join token (CNPERF_AGENT_TOKEN): it joins an agent, which
	// then uses its own credential (identity.go).
	UserToken, AgentToken string
	// TokenPlaces tell the dashboard's login page where the user token
	// is kept (the Secret, the file).
	TokenPlaces []web.TokenPlace
	// AgentReviewer, when set, authenticates agents by other tokens (on
	// Kubernetes: ServiceAccount tokens, by TokenReview).
	AgentReviewer AgentReviewer
	// RequireAgentCredentials: the join token only joins, and never acts
	// for an agent, not even one that never joined (a seed v1 client).
	RequireAgentCredentials bool
	// AgentSourceCheck: a heartbeat must come from the agent's own pod_ip
	// or node_ip (so the addresses it advertises, its responder's among
	// them, are its own). Off for agents that reach the server through
	// NAT or a proxy (cnperf server --trust-agent-addrs).
	AgentSourceCheck bool
	// Now is the clock (nil: time.Now). Tests inject one.
	Now    func() time.Time
	Logger *slog.Logger
	// Probers, when set, validates v2 probe specs before they are stored.
	Probers      *probe.Registry
	ReapEvery    time.Duration // reaper period (3 s)
	OfflineAfter time.Duration // silence before an agent is offline (10 s)
	FlushEvery   time.Duration // heartbeat flush period (1 s)
	MaxWait      time.Duration // longest long-poll wait (30 s)
	Grace        time.Duration // added to a task's timeout for its deadline (15 s)
	// ReofferAfter is how long a handed-out task may go unacknowledged
	// before a heartbeat re-offers it (DefaultReofferAfter; redispatch.go).
	ReofferAfter time.Duration
	// SessionKeepalive is the keep-alive period asked of agent sessions;
	// 0 scales it with the sessions held so that they send at most
	// SessionKeepaliveBudget keep-alives a second, within [KeepaliveMin,
	// KeepaliveMax] (keepalive.go).
	SessionKeepalive       time.Duration
	SessionKeepaliveBudget float64 // DefaultSessionKeepaliveBudget when 0
	// SessionOpenBudget bounds the store work of a session's hello
	// (DefaultSessionOpenBudget; session.go): past it the open is
	// answered 503 instead of served after the agent gave up on it.
	SessionOpenBudget time.Duration
	// Limits bound what a request may ask (zero fields: DefaultLimits).
	Limits Limits
	// Bus, when set, connects this server to the other replicas sharing
	// its database (cluster.go); nil: a single server.
	Bus Bus
	// ReplicaID names this replica in the leader lease (default: host
	// name, process id and a random suffix).
	ReplicaID string
	// LeaseTTL is how long the reaper's leader lease lasts unless renewed
	// (DefaultLeaseTTL); it is renewed every ReapEvery.
	LeaseTTL time.Duration
	// ScheduleMinEvery is the shortest interval a schedule may have
	// (schedule.DefaultMinEvery, 1 min; tests lower it).
	ScheduleMinEvery time.Duration
	// ScheduleTick is how often due schedules are looked for (1 s);
	// ScheduleBeat how often a running one is beaten (5 s).
	ScheduleTick, ScheduleBeat time.Duration
	// NoSchedules: this server starts no scheduled runs (the API still
	// stores schedules; another server on the database runs them). With
	// it unset, the replica holding the leader lease (lease.go) runs them.
	NoSchedules bool
	// MetricsPairBudget bounds the matrix's node pairs /metrics exports
	// per schedule (metrics.Options.PairBudget; 0: its default).
	MetricsPairBudget int
}

// Server serves the API. Create it with New, serve Handler, and call Run
// for the background jobs.
type Server struct {
	st      store.Store
	log     *slog.Logger
	now     func() time.Time
	opts    Options
	mux     *http.ServeMux
	handler http.Handler // mux behind the edge checks (textGuard)
	beats   *beatCache
	reg     *registrar
	disp    *dispatcher
	offers  *offers   // tasks handed out, not yet acknowledged (redispatch.go)
	keys    *testKeys // responder secrets, for the tasks' test keys
	// bigReports holds a slot per large report being handled
	// (agentapi_report.go).
	bigReports chan struct{}
	raw        *rawReads   // reads of raw outputs (outputs.go)
	writes     writeHealth // what /readyz says of the store's writes (readiness.go)
	openapi    []byte
	extras     *extras // dashboard and /metrics (dashboard.go)
	creds      credCache
	reviewed   reviewedUIDs // pod uids a TokenReview vouched for (identity.go)
	leader     atomic.Bool  // held the reaper lease at the last try (lease.go)
	started    atomic.Int64 // when Run started, Unix ns at the server's clock (reaper.go)
	sessions   sessionSet   // open agent sessions (session.go)
	refusals   refusalLog   // session opens refused for the store's pace (session.go)
	cover      coverage     // the matrix's runs and agents' nodes (coverage.go)

	// keepaliveLo and keepaliveHi bound the scaled keep-alive period
	// (KeepaliveMin, KeepaliveMax; tests shorten them); keepaliveAsked is
	// the longest period asked of a session (ns, keepalive.go).
	keepaliveLo, keepaliveHi time.Duration
	keepaliveAsked           atomic.Int64

	presenceMu      sync.Mutex // orders presence writes (presence.go)
	presenceRenewed time.Time  // the presence lease's last renewal (under presenceMu)
	presenceDropped time.Time  // the last drop of dead presence leases (reaper only)
}

// New checks opts and returns a server.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("server: no store")
	}
	if opts.UserToken == "" {
		return nil, errors.New("server: no user token (set CNPERF_USER_TOKEN or --user-token-file)")
	}
	if opts.AgentToken == "" && opts.AgentReviewer == nil {
		return nil, errors.New("server: no agent join token (set CNPERF_AGENT_TOKEN or --agent-token-file) and no ServiceAccount token review")
	}
	if opts.UserToken == opts.AgentToken {
		return nil, errors.New("server: the user and agent tokens must differ")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&opts.ReapEvery, DefaultReapEvery)
	setDefault(&opts.OfflineAfter, DefaultOfflineAfter)
	setDefault(&opts.FlushEvery, DefaultFlushEvery)
	setDefault(&opts.MaxWait, DefaultMaxWait)
	setDefault(&opts.Grace, DefaultGrace)
	setDefault(&opts.ReofferAfter, DefaultReofferAfter)
	setDefault(&opts.LeaseTTL, max(DefaultLeaseTTL, 3*opts.ReapEvery))
	if opts.LeaseTTL <= opts.ReapEvery {
		return nil, fmt.Errorf("server: the lease TTL %s must exceed the reaper period %s (the lease is renewed once a period)", opts.LeaseTTL, opts.ReapEvery)
	}
	if opts.ReplicaID == "" {
		opts.ReplicaID = NewReplicaID()
	}
	if err := checkKeepalive(opts); err != nil {
		return nil, err
	}
	if opts.SessionKeepaliveBudget == 0 {
		opts.SessionKeepaliveBudget = DefaultSessionKeepaliveBudget
	}
	setDefault(&opts.SessionOpenBudget, DefaultSessionOpenBudget)
	setDefault(&opts.ScheduleMinEvery, schedule.DefaultMinEvery)
	opts.Limits = opts.Limits.withDefaults()
	s := &Server{
		st:         opts.Store,
		log:        opts.Logger,
		now:        opts.Now,
		opts:       opts,
		beats:      newBeatCache(),
		reg:        &registrar{st: opts.Store},
		disp:       newDispatcher(),
		offers:     newOffers(),
		keys:       newTestKeys(),
		bigReports: make(chan struct{}, bigReportSlots),
		raw:        newRawReads(),

		keepaliveLo: KeepaliveMin,
		keepaliveHi: KeepaliveMax,
	}
	s.sessions.period, s.sessions.raise = s.keepaliveFor, s.raiseKeepalives
	if opts.Bus != nil {
		s.disp.share = s.publish
	}
	doc, err := openAPIDocument()
	if err != nil {
		return nil, fmt.Errorf("server: build OpenAPI document: %w", err)
	}
	s.openapi = doc
	s.routes()
	s.handler = s.textGuard(s.mux)
	if err := s.mountExtras(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler { return s.handler }

// Run runs the background jobs (heartbeat flusher, reaper) until ctx ends,
// then flushes the heartbeat cache once more.
func (s *Server) Run(ctx context.Context) error {
	s.started.Store(s.now().UnixNano())
	if err := s.seedPending(ctx); err != nil {
		s.log.Warn("list pending tasks at start", "err", err)
	}
	if err := s.seedOffers(ctx); err != nil {
		s.log.Warn("list dispatched tasks at start", "err", err)
	}
	if as, err := s.st.ListAgents(ctx, store.AgentFilter{}); err != nil {
		s.log.Warn("list agents at start", "err", err)
	} else {
		s.beats.warm(as)
	}
	var sched *schedule.Scheduler
	if !s.opts.NoSchedules {
		var err error
		if sched, err = s.scheduler(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.runBus(ctx) })
	wg.Go(func() { s.loop(ctx, s.opts.FlushEvery, s.flushBeats) })
	wg.Go(func() { s.loop(ctx, s.opts.ReapEvery, s.reapIfLeader) })
	if sched != nil {
		wg.Go(func() { sched.Run(ctx) })
	}
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.releaseLease(fctx)
	return s.flushAll(fctx)
}

func (s *Server) loop(ctx context.Context, every time.Duration, fn func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			jctx, cancel := context.WithTimeout(ctx, max(every*3, 10*time.Second))
			if err := fn(jctx); err != nil && ctx.Err() == nil {
				if store.CannotWrite(err) {
					s.writeFailed(err)
				}
				s.log.Warn("background job failed", "err", err)
			}
			cancel()
		}
	}
}

// addPendingOf has the dispatcher wake the tasks' sources, here and on
// the other replicas, in one share (dispatcher.addPending).
func (s *Server) addPendingOf(ts []store.Task) {
	srcs := make([]string, 0, len(ts))
	for _, t := range ts {
		srcs = append(srcs, t.SrcPodUID)
	}
	s.disp.addPending(srcs...)
}

// seedPending remembers which agents have pending tasks, so that they are
// woken when a node frees up after a restart.
func (s *Server) seedPending(ctx context.Context) error {
	var after int64
	for {
		ts, _, err := s.st.ListTasks(ctx, store.TaskFilter{State: store.TaskPending}, store.Page{Limit: store.MaxPageLimit, AfterID: after})
		if err != nil {
			return err
		}
		s.addPendingOf(ts)
		if len(ts) < store.MaxPageLimit {
			return nil
		}
		after = ts[len(ts)-1].ID
	}
}

// Auth.

type role int

const (
	roleUser role = iota
	roleAgent
)

func (s *Server) auth(r role, v1 bool, h http.HandlerFunc) http.HandlerFunc {
	if r == roleAgent {
		return s.authAgent(v1, h) // identity.go
	}
	want := s.opts.UserToken
	return func(w http.ResponseWriter, req *http.Request) {
		got, ok := bearer(req)
		if !ok {
			s.fail(w, req, v1, &api.Error{Status: http.StatusUnauthorized, Message: "missing bearer token (Authorization: Bearer TOKEN)"})
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			s.fail(w, req, v1, &api.Error{Status: http.StatusUnauthorized, Message: "wrong token for this endpoint"})
			return
		}
		h(w, req)
	}
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) <= len(p) || !equalFoldASCII(h[:len(p)], p) {
		return "", false
	}
	return h[len(p):], true
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i]|0x20, b[i]|0x20
		if ca != cb {
			return false
		}
	}
	return true
}
