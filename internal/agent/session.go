package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

// The agent's session (docs/control-plane.md, "Agent sessions"): one
// long-lived connection carrying presence (keep-alives), offers and their
// acks, start, the iperf hand-off and results. client.HoldSession keeps
// it open and reconnects with jittered exponential back-off. While one is
// held the heartbeat loop sends no REST heartbeats (only a heartbeat
// frame when the running or undelivered lists change) and the fetch loop
// sends pull frames instead of long polls. When a session cannot be
// opened the agent falls back to polling (a REST heartbeat a second and a
// long poll) until one opens again. Start, serving and report calls go
// over the session while it is held, over REST otherwise (link).

// reporter delivers results (the outbox).
type reporter interface {
	Report(ctx context.Context, r api.Report) (api.ReportReply, error)
}

// servingSender answers server requests (the iperf hand-off).
type servingSender interface {
	Serving(ctx context.Context, taskID string, s api.Serving) error
}

// link sends the agent's calls over its session while one is held, over
// REST otherwise, or when the session ended under the call.
type link struct {
	cl   *client.Client
	sess atomic.Pointer[client.Session]
}

func (l *link) Report(ctx context.Context, r api.Report) (api.ReportReply, error) {
	if s := l.sess.Load(); s != nil {
		rr, err := s.Report(ctx, r)
		if !errors.Is(err, client.ErrSessionClosed) {
			return rr, err
		}
	}
	return l.cl.Report(ctx, r)
}

func (l *link) Serving(ctx context.Context, taskID string, sv api.Serving) error {
	if s := l.sess.Load(); s != nil {
		if err := s.Serving(ctx, taskID, sv); !errors.Is(err, client.ErrSessionClosed) {
			return err
		}
	}
	return l.cl.Serving(ctx, taskID, sv)
}

func (l *link) Start(ctx context.Context, taskID, podUID string) error {
	if s := l.sess.Load(); s != nil {
		if err := s.Start(ctx, taskID); !errors.Is(err, client.ErrSessionClosed) {
			return err
		}
	}
	return l.cl.Start(ctx, taskID, podUID)
}

// sessionState is what the loops need to know about the session.
type sessionState struct {
	fallback atomic.Bool   // poll: no session could be opened (or NoSession)
	pulled   atomic.Bool   // a pull is outstanding on the session
	offered  chan struct{} // an offer of tasks answered the pull
	changed  chan struct{} // a session came up or ended
	// listsChanged: a task was taken or ended, or a result queued or
	// delivered (the heartbeat's lists may differ from those sent).
	listsChanged chan struct{}

	mu         sync.Mutex // guards pollCancel, sentLists
	pollCancel context.CancelFunc
	sentLists  string // the running and undelivered lists the server last got
}

func (ss *sessionState) init(noSession bool) {
	ss.offered = make(chan struct{}, 1)
	ss.changed = make(chan struct{}, 1)
	ss.listsChanged = make(chan struct{}, 1)
	ss.fallback.Store(noSession)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pollContext is the context of one long poll: it ends when a session
// comes up, so the fetch loop switches to pulls at once.
func (ss *sessionState) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	pctx, cancel := context.WithCancel(ctx)
	ss.mu.Lock()
	ss.pollCancel = cancel
	ss.mu.Unlock()
	return pctx, func() {
		ss.mu.Lock()
		ss.pollCancel = nil
		ss.mu.Unlock()
		cancel()
	}
}

func (ss *sessionState) stopPoll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.pollCancel != nil {
		ss.pollCancel()
	}
}

// listsKey identifies a heartbeat's lists, to send a heartbeat frame only
// when they change.
func listsKey(hb api.Heartbeat) string {
	r, u := slices.Clone(hb.Running), slices.Clone(hb.Undelivered)
	slices.Sort(r)
	slices.Sort(u)
	return strings.Join(r, ",") + "|" + strings.Join(u, ",")
}

// holdSession keeps the agent's session until ctx ends.
func (a *Agent) holdSession(ctx context.Context) {
	var loggedDown bool
	a.cl.HoldSession(ctx, client.SessionLoop{
		PodUID: a.id.PodUID,
		Hello: func() api.Heartbeat {
			hb := a.heartbeat()
			a.sess.mu.Lock()
			a.sess.sentLists = listsKey(hb)
			a.sess.mu.Unlock()
			return hb
		},
		OnOffer: func(s *client.Session, fr api.FetchReply) { a.takeOffer(ctx, s, fr) },
		OnUp: func(s *client.Session) {
			a.sess.pulled.Store(false)
			a.link.sess.Store(s)
			a.sess.fallback.Store(false)
			a.sess.stopPoll()
			signal(a.sess.changed)
			loggedDown = false
			a.log.Info("agent session open", "keepalive", s.KeepalivePeriod())
			a.markReady()
			if c := s.Welcome().Cancel; len(c) > 0 {
				a.cancelTasks(c, errCancelledByServer)
			}
		},
		OnDown: func(err error, held bool) {
			a.link.sess.Store(nil)
			if !held {
				// No session to be had, or not for long: poll until one
				// opens.
				if !a.sess.fallback.Swap(true) || !loggedDown {
					a.log.Warn("no agent session; polling meanwhile", "err", err)
				}
				loggedDown = true
			} else {
				// A held session ended (a server restart): reconnect
				// first, poll only if that fails.
				a.log.Warn("agent session lost; reconnecting", "err", err)
			}
			signal(a.sess.changed)
		},
	})
	a.link.sess.Store(nil)
}

// takeOffer accepts what an offer carries and acks its tasks. It runs on
// the session's reading goroutine: nothing here waits for a reply.
func (a *Agent) takeOffer(ctx context.Context, s *client.Session, fr api.FetchReply) {
	if len(fr.Cancel) > 0 {
		a.cancelTasks(fr.Cancel, errCancelledByServer)
	}
	for _, req := range fr.Serve {
		a.servers.start(ctx, req)
	}
	if len(fr.Tasks) == 0 {
		return
	}
	ids := make([]string, 0, len(fr.Tasks))
	for _, t := range fr.Tasks {
		a.accept(ctx, t) // ignores a task it holds or has done: still acked
		ids = append(ids, t.TaskID)
	}
	if err := s.Ack(ids); err != nil {
		a.log.Warn("cannot ack offered tasks; the server offers them again", "err", err)
	}
	a.sess.pulled.Store(false)
	signal(a.sess.offered)
}

// sessionPull is the fetch loop's turn while a session is held (it pulls
// and waits for an offer, a freed slot or the session's end) or while the
// first session is being opened; false means poll.
func (a *Agent) sessionPull(ctx context.Context) bool {
	s := a.link.sess.Load()
	if s == nil {
		if a.sess.fallback.Load() {
			return false
		}
		select { // a session is being opened
		case <-ctx.Done():
		case <-a.sess.changed:
		case <-time.After(time.Second):
		}
		return true
	}
	if !a.sess.pulled.Swap(true) {
		if err := s.Pull(); err != nil {
			a.sess.pulled.Store(false)
		}
	}
	select {
	case <-ctx.Done():
	case <-s.Done():
	case <-a.sess.offered:
	case <-a.freed:
	case <-a.sess.changed:
	}
	return true
}

// sessionBeat sends a heartbeat frame when the held session's server has
// not seen the agent's current lists. It returns the session held (nil
// when none is), whether its server has the current lists, and rest:
// no session is held and a REST heartbeat is due instead (fallback).
// Without a session and before the first attempt failed, nothing is sent.
func (a *Agent) sessionBeat(ctx context.Context) (s *client.Session, current, rest bool) {
	s = a.link.sess.Load()
	if s == nil {
		return nil, false, a.sess.fallback.Load()
	}
	hb := a.heartbeat()
	key := listsKey(hb)
	a.sess.mu.Lock()
	same := key == a.sess.sentLists
	a.sess.mu.Unlock()
	if same {
		return s, true, false
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	reply, err := s.Heartbeat(bctx, hb)
	cancel()
	if err != nil {
		if !errors.Is(err, client.ErrSessionClosed) { // else the next session's hello carries the lists
			a.log.Warn("session heartbeat refused", "err", err)
		}
		return s, false, false
	}
	a.sess.mu.Lock()
	a.sess.sentLists = key
	a.sess.mu.Unlock()
	if len(reply.Cancel) > 0 {
		a.cancelTasks(reply.Cancel, errCancelledByServer)
	}
	return s, true, false
}
