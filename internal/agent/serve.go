package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe/external"
)

// maxServers bounds the iperf servers one agent runs at once.
const maxServers = 16

// serverSet runs the destination side of iperf and iperf3 tasks: on the
// server's request it starts the tool's server on a free port of the pod
// IP, tells the server the port (POST .../serving), and kills it when the
// tool exits (iperf3 -1 after its one test) or the request's time is up.
type serverSet struct {
	cl  servingSender
	id  Identity
	log *slog.Logger
	sem chan struct{}

	mu  sync.Mutex // guards srv
	srv map[string]*external.Server
	wg  sync.WaitGroup
}

func newServerSet(cl servingSender, id Identity, log *slog.Logger) *serverSet {
	return &serverSet{cl: cl, id: id, log: log, sem: make(chan struct{}, maxServers), srv: map[string]*external.Server{}}
}

// start handles one server request in the background.
func (s *serverSet) start(ctx context.Context, req api.ServeRequest) {
	s.wg.Go(func() { s.serve(ctx, req) })
}

func (s *serverSet) serve(ctx context.Context, req api.ServeRequest) {
	log := s.log.With("task_id", req.TaskID, "tool", req.Tool)
	s.mu.Lock()
	if old := s.srv[req.TaskID]; old != nil {
		s.mu.Unlock()
		s.answer(ctx, log, req.TaskID, api.Serving{PodUID: s.id.PodUID, Port: old.Port()})
		return
	}
	s.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-s.sem }()

	keep := time.Duration(req.TimeoutS * float64(time.Second))
	if keep <= 0 || keep > time.Hour {
		keep = time.Hour
	}
	// The server process is bound by its own time, not by ctx: closeAll
	// kills it on shutdown.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keep)
	defer cancel()
	bind := s.id.PodIP // never another address, whatever the request says
	srv, err := external.StartServerOnFreePort(sctx, req.Tool, req.UDP, bind)
	if err != nil {
		log.Warn("could not start the destination server", "err", err)
		s.answer(ctx, log, req.TaskID, api.Serving{PodUID: s.id.PodUID, Error: err.Error()})
		return
	}
	s.mu.Lock()
	s.srv[req.TaskID] = srv
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.srv, req.TaskID)
		s.mu.Unlock()
		_ = srv.Close()
	}()
	log.Info("destination server started", "addr", srv.Addr(), "udp", req.UDP)
	if !s.answer(ctx, log, req.TaskID, api.Serving{PodUID: s.id.PodUID, Port: srv.Port()}) {
		return
	}
	select {
	case <-srv.Done():
	case <-sctx.Done():
	}
}

// answer tells the server the outcome, retrying a few times; false when it
// never got through.
func (s *serverSet) answer(ctx context.Context, log *slog.Logger, taskID string, sv api.Serving) bool {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = s.cl.Serving(actx, taskID, sv)
		cancel()
		if err == nil {
			return true
		}
		if st := api.StatusOf(err); st >= 400 && st < 500 {
			break // the hand-off is gone (task ended or server restarted)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(attempt+1) * 300 * time.Millisecond):
		}
	}
	log.Warn("could not tell the server about the destination server", "err", err)
	return false
}

// closeAll kills every server and waits for the handlers.
func (s *serverSet) closeAll() {
	s.mu.Lock()
	for _, srv := range s.srv {
		_ = srv.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
