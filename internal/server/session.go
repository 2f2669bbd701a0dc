package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// Agent sessions (POST /api/v2/agent/session?pod_uid=): one full-duplex
// HTTP request per agent whose bodies are NDJSON streams of
// api.SessionFrame. The first frame is the agent's hello (its heartbeat):
// it is checked and recorded exactly as a REST heartbeat is, and refused
// with the same HTTP status before the answer starts. Then:
//
//   - presence is the open session and a keep-alive frame every
//     KeepaliveS (memory only, beatCache.alive), a period scaled with the
//     sessions held (keepalive.go); a session silent for two of its
//     periods and a second ends (the sweeper, below);
//   - a pull frame asks for tasks: a dispatch pass claims them as a long
//     poll would, run wherever the agent's long poll would be woken
//     (dispatcher.hold), and sends one offer; server requests and
//     cancellations are sent whenever they wait;
//   - the agent acks the offered tasks it holds; an offer not acked within
//     ReofferAfter is offered again (at-least-once, as for polls);
//   - heartbeat, start, serving and report frames go through the same
//     checks and code as their REST endpoints, as the caller that opened
//     the session (403 for another agent's task), and are answered by a
//     reply frame with the same seq;
//   - the caller's token, and its right to act for the agent, are checked
//     again at the first frame credCacheTTL after the last check (a
//     credential found in the store is trusted as long, so a check per
//     frame found nothing sooner; it cost a store read on the path of
//     every start); a credential revoked here ends the session at once
//     (bye, status 401), one revoked on another replica within
//     credCacheTTL, and a newer session of the same agent ends it (409).

// sessionSilence is the silence limit of the next session to open (its
// hello must come within it): two of the periods it is asked for and a
// second (keepalive.go). An open session's limit follows its own period.
func (s *Server) sessionSilence() time.Duration {
	return silenceOf(s.keepaliveFor(s.sessions.count() + 1))
}

// DefaultSessionOpenBudget bounds the store work of a session's hello
// (its heartbeat: the credential, the agent's registration, the tasks it
// runs). An agent gives up on an open after 15 s (client.HoldSession)
// and opens again; an open still waiting on the store then would be
// served to nobody, and its retry would queue behind it: under a burst
// past the store's pace the queue only grew and the sessions collapsed
// (docs/control-plane.md, "Agent sessions"). Past this
// budget the open is answered 503 with Retry-After while the agent still
// waits: its client moves to the next replica and backs off with jitter,
// and the store's work for it is dropped (registrar).
const DefaultSessionOpenBudget = 10 * time.Second

// sessionRetryAfterS is the Retry-After of an open refused for the
// store's pace, in seconds (the agent's back-off jitters its own wait).
const sessionRetryAfterS = 5

// refusalLogEvery is the least time between two log lines about opens
// refused for the store's pace.
const refusalLogEvery = 10 * time.Second

// refusalLog counts the session opens refused for the store's pace and
// logs them at most once per refusalLogEvery: a burst of thousands of
// agents refused is a line, not thousands (each one is at debug level).
type refusalLog struct {
	mu   sync.Mutex // guards last, n
	last time.Time
	n    int
}

// note counts one refusal and logs the count when the last line is old
// enough (the first refusal at once).
func (l *refusalLog) note(log *slog.Logger, budget time.Duration) {
	l.mu.Lock()
	l.n++
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < refusalLogEvery {
		l.mu.Unlock()
		return
	}
	n, since := l.n, l.last
	l.n, l.last = 0, now
	l.mu.Unlock()
	args := []any{"refused", n, "budget", budget}
	if !since.IsZero() {
		args = append(args, "since", since.UTC().Format(time.RFC3339))
	}
	log.Warn("agent session opens refused: the store could not record their hellos in time (it is behind); the agents retry with back-off", args...)
}

// sessionWriteTimeout bounds one frame's write.
const sessionWriteTimeout = 10 * time.Second

// sweepEvery is how often the sweeper looks for silent sessions and stuck
// writes. Silence and write limits are enforced by this one ticker rather
// than by a read and a write deadline reset on every frame: 10,000
// sessions kept 20,000 runtime timers moving, each keep-alive reset two
// of them, and the runtime's monitor thread, woken by the nearest timer
// every fraction of a millisecond, cost a fifth of the server's CPU
// (docs/control-plane.md, "Server CPU per agent").
const sweepEvery = time.Second

// sessionMaxLine bounds one frame (a report carries up to MaxReportBody).
const sessionMaxLine = api.MaxReportBody + 64<<10

// agentSession is one open session.
type agentSession struct {
	uid    string
	r      *http.Request // the opening request: its caller acts for every frame
	token  string
	w      http.ResponseWriter
	rc     *http.ResponseController
	cancel context.CancelCauseFunc

	wmu sync.Mutex // serialises frames written

	pull    atomic.Bool // the agent has room for tasks
	reoffer atomic.Bool // the next dispatch pass looks for unacknowledged offers
	// reofferTimer: a look at the offers is scheduled (at most one at a time)
	reofferTimer atomic.Bool

	// Dispatch passes run in a goroutine started on demand (kick), not in
	// one parked per session: 50,000 sessions keep one goroutine each.
	kmu     sync.Mutex // guards running, again, closed
	running bool
	again   bool
	closed  bool
	passes  sync.WaitGroup
	ctx     context.Context
	srv     *Server

	hbMu sync.Mutex
	hb   api.Heartbeat // the latest heartbeat, to register the agent again

	checked  time.Time // the token's last check (read loop only)
	actedFor time.Time // actFor's last pass for uid (read loop only; sessionActFor)

	asked atomic.Int64 // the keep-alive period asked of the agent (ns; only raised)

	lastFrame  atomic.Int64 // when the latest frame was read (unix ns)
	silent     atomic.Bool  // the sweeper ended the session for its silence
	writeSince atomic.Int64 // when the write in progress began (unix ns; 0: none)
	dmu        sync.Mutex   // guards done
	done       bool         // the handler is returning: w is not to be touched
}

// sessionEnded is why a session's context ends.
type sessionEnded struct {
	status int
	msg    string
}

func (e *sessionEnded) Error() string { return e.msg }

// sessionSet holds the open sessions, one per agent.
type sessionSet struct {
	mu       sync.Mutex // guards m, sweeping
	m        map[string]*agentSession
	sweeping bool // a sweeper runs (while sessions are open)
	// period is the keep-alive period to ask of n sessions; raise asks
	// sessions asked less for it (Server.raiseKeepalives, run by one
	// goroutine at a time: raising).
	period  func(n int) time.Duration
	raise   func([]*agentSession, time.Duration)
	raising atomic.Bool
	// presence: sessions opened and ended since the last flush wrote
	// them to the store (presence.go), by pod uid.
	presence map[string]store.Presence
}

// add registers a session and returns the one it replaces (nil if none).
// It starts the sweeper if none runs.
func (ss *sessionSet) add(a *agentSession) *agentSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*agentSession{}
	}
	old := ss.m[a.uid]
	ss.m[a.uid] = a
	ss.mark(a.uid, true, time.Time{})
	if !ss.sweeping {
		ss.sweeping = true
		go ss.sweep()
	}
	return old
}

// sweep ends sessions silent for their silence limit (two of the periods
// asked of them and a second), unblocks writes stuck for
// sessionWriteTimeout, and has the sessions asked a shorter keep-alive
// period than the sessions held now call for asked the longer one, every
// sweepEvery, until no session is left.
func (ss *sessionSet) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var all, low []*agentSession
	for range t.C {
		ss.mu.Lock()
		if len(ss.m) == 0 {
			ss.sweeping = false
			ss.mu.Unlock()
			return
		}
		var period time.Duration
		if ss.period != nil {
			period = ss.period(len(ss.m))
		}
		all = all[:0]
		for _, a := range ss.m {
			all = append(all, a)
		}
		ss.mu.Unlock()
		now := time.Now().UnixNano()
		low = low[:0]
		for _, a := range all {
			asked := time.Duration(a.asked.Load())
			if quiet, silence := time.Duration(now-a.lastFrame.Load()), silenceOf(asked); quiet > silence {
				a.silent.Store(true)
				a.cancel(fmt.Errorf("read: no frame for %v (limit %v)", quiet.Round(time.Millisecond), silence))
			}
			if since := a.writeSince.Load(); since != 0 && time.Duration(now-since) > sessionWriteTimeout {
				a.expireWrite()
			}
			if asked < period {
				low = append(low, a)
			}
		}
		clear(all)
		if len(low) > 0 && ss.raise != nil && ss.raising.CompareAndSwap(false, true) {
			go func(low []*agentSession) {
				defer ss.raising.Store(false)
				ss.raise(low, period)
			}(slices.Clone(low))
		}
		clear(low)
	}
}

// expireWrite makes a blocked write fail (its peer stopped reading).
func (a *agentSession) expireWrite() {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	if !a.done {
		_ = a.rc.SetWriteDeadline(time.Now())
	}
}

// wake makes the blocked read return (the session ended).
func (a *agentSession) wake() {
	a.dmu.Lock()
	defer a.dmu.Unlock()
	if !a.done {
		_ = a.rc.SetReadDeadline(time.Now())
	}
}

func (ss *sessionSet) remove(a *agentSession) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m[a.uid] == a {
		delete(ss.m, a.uid)
		// An agent whose session went silent is silent since its last
		// frame (its node died, or the path to it); one that closed its
		// session (or whose session this server ended) since now.
		var since time.Time
		if a.silent.Load() {
			since = time.Unix(0, a.lastFrame.Load())
		}
		ss.mark(a.uid, false, since)
	}
}

// end ends the agent's session, if one is open.
func (ss *sessionSet) end(uid string, cause *sessionEnded) {
	ss.mu.Lock()
	a := ss.m[uid]
	ss.mu.Unlock()
	if a != nil {
		a.cancel(cause)
	}
}

// endAll ends every session (the server shuts down).
func (ss *sessionSet) endAll(cause *sessionEnded) {
	ss.mu.Lock()
	all := make([]*agentSession, 0, len(ss.m))
	for _, a := range ss.m {
		all = append(all, a)
	}
	ss.mu.Unlock()
	for _, a := range all {
		a.cancel(cause)
	}
}

// count is the number of open sessions.
func (ss *sessionSet) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// get returns the agent's open session on this replica, or nil.
func (ss *sessionSet) get(uid string) *agentSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[uid]
}

// Sessions counts the agents holding a session now.
func (s *Server) Sessions() int { return s.sessions.count() }

// CloseSessions ends every agent session with a bye; register it with
// http.Server.RegisterOnShutdown, since Shutdown waits for handlers and a
// session's handler runs until the session ends.
func (s *Server) CloseSessions() {
	s.sessions.endAll(&sessionEnded{status: http.StatusServiceUnavailable, msg: "the server is shutting down"})
}

var (
	keepaliveLine = []byte(api.KeepaliveLine)
	keepaliveEcho = []byte(api.KeepaliveLine + "\n") // written as is: no allocation per keep-alive
)

// handleSession serves one agent session.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	uid, err := agentUID(r)
	if err == nil {
		err = s.actFor(r, uid)
	}
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		s.fail(w, r, false, &api.Error{Status: http.StatusNotImplemented, Message: "this connection cannot carry a full-duplex session: poll instead"})
		return
	}
	// The server's own read and write timeouts bound ordinary requests;
	// a session's hello must come within the silence limit, and after it
	// the sweeper bounds silences and writes.
	_ = rc.SetReadDeadline(time.Now().Add(s.sessionSilence()))
	// A refusal gets its write timeout as it is written: the hello may take
	// up to the silence limit to come and the store up to the open budget
	// to record it, and an answer written past a timeout set before those
	// waits reaches nobody (an open refused after more than 10 s used to
	// be lost so, and its agent waited out its own 15 s). A welcome clears
	// the deadlines before it is written.
	refuse := func(err error) {
		_ = rc.SetWriteDeadline(time.Now().Add(sessionWriteTimeout))
		s.fail(w, r, false, err)
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 1024), sessionMaxLine)
	if !sc.Scan() {
		refuse(api.BadRequest("(body)", "the session ended before its hello frame: %v", sc.Err()))
		return
	}
	var hello api.SessionFrame
	if err := api.DecodeBytes(sc.Bytes(), &hello); err != nil {
		refuse(err)
		return
	}
	if hello.Type != api.FrameHello || hello.Heartbeat == nil {
		refuse(api.BadRequest("type", "the first frame must be a hello with the agent's heartbeat"))
		return
	}
	if err := s.sessionHeartbeatCheck(r, uid, hello.Heartbeat); err != nil {
		refuse(err)
		return
	}
	hctx, hcancel := context.WithTimeout(r.Context(), s.opts.SessionOpenBudget)
	reply, err := s.heartbeat(hctx, *hello.Heartbeat)
	hcancel()
	if err != nil {
		if r.Context().Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			s.refusals.note(s.log, s.opts.SessionOpenBudget)
			s.log.Debug("agent session refused: the store is behind", "pod_uid", uid, "err", err)
			w.Header().Set("Retry-After", strconv.Itoa(sessionRetryAfterS))
			err = &api.Error{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf(
				"the server could not record this agent's hello within %v (its store is behind): open the session again later", s.opts.SessionOpenBudget)}
		}
		refuse(err)
		return
	}
	tok, _ := bearer(r)
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	a := &agentSession{uid: uid, r: r, token: tok, w: w, rc: rc, cancel: cancel,
		hb: *hello.Heartbeat, checked: s.now(), actedFor: s.now(), ctx: ctx, srv: s}
	period := s.keepaliveFor(s.sessions.count() + 1)
	s.ask(a, period)
	a.lastFrame.Store(time.Now().UnixNano())
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	defer func() {
		a.dmu.Lock()
		a.done = true
		a.dmu.Unlock()
	}()
	if old := s.sessions.add(a); old != nil {
		old.cancel(&sessionEnded{status: http.StatusConflict, msg: "a newer session of this agent replaced this one"})
	}
	defer s.sessions.remove(a)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if err := s.send(a, api.SessionFrame{Type: api.FrameWelcome, Reply: &reply, KeepaliveS: period.Seconds()}); err != nil {
		return
	}
	s.log.Debug("agent session open", "pod_uid", uid)

	hook := s.disp.hold(uid, a.kick)
	// A bye (revocation, replacement, shutdown) is sent as soon as the
	// session's context ends, and the read below is woken.
	byeDone := make(chan struct{})
	stopBye := context.AfterFunc(ctx, func() {
		defer close(byeDone)
		var ended *sessionEnded
		if errors.As(context.Cause(ctx), &ended) {
			_ = s.send(a, api.SessionFrame{Type: api.FrameBye, Status: ended.status, Error: &api.ErrorBody{Error: ended.msg}})
		}
		a.wake()
	})
	// Unacknowledged offers from before this session (its previous
	// connection broke after they were sent) are looked at once they are
	// due; tasks waiting now go out at the first pull.
	s.scheduleReoffer(a)
	for sc.Scan() {
		a.lastFrame.Store(time.Now().UnixNano())
		if err := s.sessionFrame(ctx, a, sc.Bytes()); err != nil {
			cancel(err)
			break
		}
		if ctx.Err() != nil {
			break
		}
		// The silence is counted from here, as the read deadline set
		// after each frame counted it: a frame slow to handle (a big
		// report on a loaded machine) does not eat into it.
		a.lastFrame.Store(time.Now().UnixNano())
	}
	cancel(fmt.Errorf("read: %w", errOr(sc.Err(), errors.New("the agent closed the session"))))
	if !stopBye() {
		<-byeDone
	}
	s.disp.release(uid, hook)
	a.kmu.Lock()
	a.closed = true
	a.kmu.Unlock()
	a.passes.Wait() // nothing may write to w once the handler returns
	s.log.Debug("agent session closed", "pod_uid", uid, "cause", context.Cause(ctx))
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// send writes one frame and flushes it.
func (s *Server) send(a *agentSession, f api.SessionFrame) error {
	line, err := encodeFrame(f)
	if err != nil {
		return err
	}
	return a.write(line)
}

// encodeFrame is a frame's line.
func encodeFrame(f api.SessionFrame) ([]byte, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	return append(b, '\n'), nil
}

func (a *agentSession) write(line []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.writeSince.Store(time.Now().UnixNano())
	defer a.writeSince.Store(0)
	if _, err := a.w.Write(line); err != nil {
		return err
	}
	return a.rc.Flush()
}

// sessionHeartbeatCheck is heartbeatFromCaller for a session's heartbeat:
// it must also be the session's own agent.
func (s *Server) sessionHeartbeatCheck(r *http.Request, uid string, hb *api.Heartbeat) error {
	if err := s.heartbeatFromCaller(r, hb); err != nil {
		return err
	}
	if hb.PodUID != uid {
		return forbidden("pod_uid", "this session belongs to agent %q, not %q", uid, hb.PodUID)
	}
	return nil
}

// recheck authenticates the session's token again (a revoked credential
// or an expired ServiceAccount token ends the session as it would fail a
// request).
func (s *Server) recheck(ctx context.Context, a *agentSession) error {
	c, err := s.identify(ctx, a.token)
	if err != nil {
		st := statusOf(err)
		return &sessionEnded{status: st, msg: err.Error()}
	}
	if c != callerOf(a.r) {
		return &sessionEnded{status: http.StatusUnauthorized, msg: "the session's token now names another caller"}
	}
	a.checked = s.now()
	return nil
}

// sessionActFor is actFor for the session's own agent, trusted for
// credCacheTTL once it passed (the session open's check is the first),
// as a credential found in the store is: a session opened with the join
// token would otherwise read the agent's credential at every start, on
// the path of every task of a round. A credential issued to the agent
// elsewhere meanwhile ends the join token's right within credCacheTTL,
// as a revocation on another replica ends a cached credential's.
func (s *Server) sessionActFor(a *agentSession) error {
	now := s.now()
	if now.Sub(a.actedFor) < credCacheTTL {
		return nil
	}
	if err := s.actFor(a.r, a.uid); err != nil {
		return err
	}
	a.actedFor = now
	return nil
}

// sessionFrame handles one frame from the agent. An error ends the
// session; a refused request is a reply carrying the error.
func (s *Server) sessionFrame(ctx context.Context, a *agentSession, line []byte) error {
	now := s.now()
	if bytes.Equal(line, keepaliveLine) {
		if now.Sub(a.checked) >= credCacheTTL {
			if err := s.recheck(ctx, a); err != nil {
				return err
			}
		}
		if !s.beats.alive(a.uid, now) {
			// The reaper marked the agent offline (the server stalled):
			// register it again, as its next heartbeat would.
			a.hbMu.Lock()
			hb := a.hb
			a.hbMu.Unlock()
			if _, err := s.heartbeat(ctx, hb); err != nil {
				return fmt.Errorf("register the agent again: %w", err)
			}
			s.sessions.hold(a)
		}
		return a.write(keepaliveEcho)
	}
	if now.Sub(a.checked) >= credCacheTTL {
		if err := s.recheck(ctx, a); err != nil {
			return err
		}
	}
	var f api.SessionFrame
	if err := api.DecodeBytes(line, &f); err != nil {
		return s.replyErr(a, 0, err)
	}
	switch f.Type {
	case api.FrameKeepalive:
		return a.write(keepaliveEcho)
	case api.FramePull:
		a.pull.Store(true)
		a.wakeUp()
		return nil
	case api.FrameAck:
		for _, id := range f.TaskIDs {
			s.offers.ack(a.uid, id)
		}
		return nil
	case api.FrameHeartbeat:
		if f.Heartbeat == nil {
			return s.replyErr(a, f.Seq, api.BadRequest("heartbeat", "missing"))
		}
		if err := s.sessionHeartbeatCheck(a.r, a.uid, f.Heartbeat); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		reply, err := s.heartbeat(ctx, *f.Heartbeat)
		if err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		a.hbMu.Lock()
		a.hb = *f.Heartbeat
		a.hbMu.Unlock()
		return s.send(a, api.SessionFrame{Type: api.FrameReply, Seq: f.Seq, Reply: &reply})
	case api.FrameStart:
		req := api.StartRequest{PodUID: a.uid}
		if err := s.checkTaskFrame(a, f.TaskID); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		if err := s.sessionActFor(a); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		if _, err := s.start(ctx, f.TaskID, req.PodUID); err != nil { // start checks the task is the agent's
			return s.replyErr(a, f.Seq, err)
		}
		return s.send(a, api.SessionFrame{Type: api.FrameReply, Seq: f.Seq})
	case api.FrameServing:
		if f.Serving == nil {
			return s.replyErr(a, f.Seq, api.BadRequest("serving", "missing"))
		}
		if err := s.checkTaskFrame(a, f.TaskID); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		if err := s.serving(a.r, f.TaskID, *f.Serving); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		return s.send(a, api.SessionFrame{Type: api.FrameReply, Seq: f.Seq})
	case api.FrameReport:
		if f.Report == nil {
			return s.replyErr(a, f.Seq, api.BadRequest("report", "missing"))
		}
		if err := s.reportByOwner(a.r, f.Report); err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		rr, err := s.report(ctx, *f.Report)
		if err != nil {
			return s.replyErr(a, f.Seq, err)
		}
		return s.send(a, api.SessionFrame{Type: api.FrameReply, Seq: f.Seq, Reported: &rr})
	default:
		return s.replyErr(a, f.Seq, api.BadRequest("type", "%q is not a frame an agent sends", f.Type))
	}
}

// checkTaskFrame checks a frame's task id.
func (s *Server) checkTaskFrame(_ *agentSession, id string) error {
	if id == "" {
		return api.BadRequest("task_id", "missing")
	}
	return checkLen("task_id", id, MaxUIDLen)
}

// replyErr answers a refused frame with its error, as a REST call would
// (internal errors are logged and answered without detail).
func (s *Server) replyErr(a *agentSession, seq uint64, err error) error {
	code := statusOf(err)
	body := &api.ErrorBody{Error: err.Error()}
	var ae *api.Error
	if errors.As(err, &ae) {
		body.Field, body.Error = ae.Field, ae.Error()
	}
	if store.CannotWrite(err) {
		body = &api.ErrorBody{Error: s.storeCannotWrite(a.r, err)}
	} else if code == http.StatusInternalServerError {
		s.log.Error("session frame failed", "pod_uid", a.uid, "err", err)
		body = &api.ErrorBody{Error: "internal error (see the server log)"}
	}
	return s.send(a, api.SessionFrame{Type: api.FrameReply, Seq: seq, Status: code, Error: body})
}

// kick runs a dispatch pass soon: in a new goroutine unless one runs,
// which then makes another pass. It never blocks (the dispatcher calls it
// under its lock).
func (a *agentSession) kick() {
	a.kmu.Lock()
	defer a.kmu.Unlock()
	if a.closed {
		return
	}
	a.again = true
	if a.running {
		return
	}
	a.running = true
	a.passes.Add(1)
	go a.srv.dispatchPasses(a)
}

func (a *agentSession) wakeUp() { a.kick() }

// enter lets a writer other than the handler and its dispatch passes
// write to the session until it calls a.passes.Done; false when the
// handler is returning (nothing may write to w then).
func (a *agentSession) enter() bool {
	a.kmu.Lock()
	defer a.kmu.Unlock()
	if a.closed {
		return false
	}
	a.passes.Add(1)
	return true
}

// dispatchPasses makes passes while kicks ask for them.
func (s *Server) dispatchPasses(a *agentSession) {
	defer a.passes.Done()
	for {
		a.kmu.Lock()
		if !a.again || a.ctx.Err() != nil {
			a.running = false
			a.kmu.Unlock()
			return
		}
		a.again = false
		a.kmu.Unlock()
		s.dispatchPass(a.ctx, a)
	}
}

// scheduleReoffer makes a dispatch pass look for unacknowledged offers
// once they are due.
func (s *Server) scheduleReoffer(a *agentSession) {
	if !a.reofferTimer.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(s.opts.ReofferAfter+100*time.Millisecond, func() {
		a.reofferTimer.Store(false)
		a.reoffer.Store(true)
		a.wakeUp()
	})
}

// dispatchPass sends the agent what waits for it: tasks when it has
// pulled (claimed as a long poll claims them), server requests and
// cancellations at once. Passes run when the dispatcher notifies the
// agent (task creation, freed nodes, hand-offs, cancellations, re-offers:
// the same notifications that wake a long poll), on a pull and when
// offers fall due.
func (s *Server) dispatchPass(ctx context.Context, a *agentSession) {
	if a.reoffer.Swap(false) {
		s.reofferSession(ctx, a)
	}
	if !a.pull.Load() {
		serve, cancel := s.disp.takeServeCancel(a.uid)
		s.offer(ctx, a, nil, serve, cancel)
		return
	}
	// Tasks in the mail (claimed at their creation, re-offers, hand-offs
	// ready) answer the pull without a claim of its own: a claim is a
	// store transaction, and the next pull makes one.
	var claimed []api.AgentTask
	if !s.disp.hasMail(a.uid) {
		var err error
		if claimed, err = s.claim(ctx, a.uid); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("session claim failed", "pod_uid", a.uid, "err", err)
				a.cancel(err)
			}
			return
		}
	}
	mailed, serve, cancel := s.disp.mail(a.uid)
	s.offer(ctx, a, append(claimed, mailed...), serve, cancel)
}

// offer sends one offer frame, if it holds anything; false when the
// session broke.
func (s *Server) offer(ctx context.Context, a *agentSession, tasks []api.AgentTask, serve []api.ServeRequest, cancel []string) bool {
	if len(tasks) == 0 && len(serve) == 0 && len(cancel) == 0 {
		return true
	}
	if len(tasks) > 0 {
		s.giveTestKeys(ctx, tasks)
		a.pull.Store(false)
		s.offers.handed(a.uid, tasks, s.now())
		s.scheduleReoffer(a)
	} else {
		tasks = []api.AgentTask{}
	}
	if err := s.send(a, api.SessionFrame{Type: api.FrameOffer, Offer: &api.FetchReply{Tasks: tasks, Serve: serve, Cancel: cancel}}); err != nil {
		// The offers stay recorded: the next session or poll gets them
		// again once they are due.
		a.cancel(fmt.Errorf("write offer: %w", err))
		return false
	}
	return true
}

// reofferSession queues again the tasks offered to the agent and not
// acknowledged within ReofferAfter, while the store still holds them
// dispatched (reoffer, for a session: the agent acks what it holds).
func (s *Server) reofferSession(ctx context.Context, a *agentSession) {
	now := s.now()
	a.hbMu.Lock()
	hb := a.hb
	a.hbMu.Unlock()
	hb.Running, hb.Undelivered = nil, nil
	if s.reoffer(ctx, hb, now) > 0 {
		// The offer never reached the agent as far as the server can
		// tell: the pull it answered is still owed.
		a.pull.Store(true)
	}
	// Offers not yet due (a long poll that claimed tasks after the
	// session opened and whose answer was lost) are looked at again, as
	// long as any is unacknowledged.
	if s.offers.holds(a.uid) {
		s.scheduleReoffer(a)
	}
}
