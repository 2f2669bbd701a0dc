package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// Session is an agent's open session (api.SessionPath): one full-duplex
// HTTP request whose bodies are NDJSON streams of api.SessionFrame. Its
// methods may be called from any goroutine. Offers are handed to the
// OnOffer function given at OpenSession, from the goroutine that reads
// the session: it must not wait for a reply of the same session (start,
// report, ...), or the session stalls.
type Session struct {
	uid       string
	keepalive atomic.Int64 // the period the server asks for (ns): its welcome, raised by keep-alive frames
	welcome   api.HeartbeatReply
	body      io.ReadCloser
	pw        *io.PipeWriter
	onOffer   func(*Session, api.FetchReply)

	wmu sync.Mutex // serialises frames written

	mu      sync.Mutex // guards seq, pending
	seq     uint64
	pending map[uint64]chan api.SessionFrame

	kaEcho chan struct{} // the server's keep-alive echoes
	done   chan struct{} // closed when the session ends
	err    error         // why it ended (set before done closes)
	once   sync.Once
}

// ErrSessionClosed is returned by a Session's calls once it has ended
// (wrapped with the reason): the caller falls back to the REST endpoint.
var ErrSessionClosed = errors.New("agent session closed")

// SessionUnsupported reports whether err from OpenSession says the server
// holds no sessions (an older server: 404 or 405; a connection that cannot
// be full duplex: 501), so that the agent keeps polling for a while.
func SessionUnsupported(err error) bool {
	switch api.StatusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// OpenSession opens the agent's session with its heartbeat as the hello
// frame and returns once the server welcomed it. A refused hello is the
// REST heartbeat's error (*api.Error with its status). onOffer receives
// each offer (see Session).
func (c *Client) OpenSession(ctx context.Context, podUID string, hello api.Heartbeat, onOffer func(*Session, api.FetchReply)) (*Session, error) {
	line, err := json.Marshal(api.SessionFrame{Type: api.FrameHello, Heartbeat: &hello})
	if err != nil {
		return nil, fmt.Errorf("encode hello: %w", err)
	}
	pr, pw := io.Pipe()
	body := io.MultiReader(bytes.NewReader(append(line, '\n')), pr)
	in := c.cur.Load() // the replica the session goes to (failover.go)
	u := c.bases[in] + api.SessionPath + "?" + url.Values{"pod_uid": {podUID}}.Encode()
	// The session outlives ctx's deadline: only the open is bounded by it.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, u, body)
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("open session: %w", err)
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/x-ndjson")
	tok, err := c.bearerToken()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("open session: %w", err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := *c.hc
	hc.Timeout = 0 // the session is long-lived: keep-alives bound it instead
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := hc.Do(req)
		got <- answer{resp, err}
	}()
	var resp *http.Response
	select {
	case a := <-got:
		if a.err != nil {
			pw.Close()
			c.moveOn(in) // the next try (session or REST) goes to the next replica
			return nil, fmt.Errorf("open session: %w", a.err)
		}
		resp = a.resp
	case <-ctx.Done():
		pw.CloseWithError(ctx.Err())
		go func() {
			if a := <-got; a.resp != nil {
				a.resp.Body.Close()
			}
		}()
		return nil, fmt.Errorf("open session: %w", ctx.Err())
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		pw.Close()
		if unavailable(resp.StatusCode) {
			c.moveOn(in)
		}
		return nil, errorFrom(resp.StatusCode, data)
	}
	s := &Session{uid: podUID, body: resp.Body, pw: pw, onOffer: onOffer,
		pending: map[uint64]chan api.SessionFrame{}, kaEcho: make(chan struct{}, 1), done: make(chan struct{})}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1024), api.MaxReportBody+64<<10)
	welcomed := make(chan error, 1)
	go s.read(sc, welcomed)
	select {
	case err := <-welcomed:
		if err != nil {
			s.close(err)
			return nil, fmt.Errorf("open session: %w", err)
		}
	case <-ctx.Done():
		s.close(ctx.Err())
		return nil, fmt.Errorf("open session: %w", ctx.Err())
	}
	return s, nil
}

// bearerToken is the token a request carries now.
func (c *Client) bearerToken() (string, error) {
	if c.tokenFile == "" {
		return c.token, nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// read reads frames until the session ends; the first must be welcome.
func (s *Session) read(sc *bufio.Scanner, welcomed chan<- error) {
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Equal(line, []byte(api.KeepaliveLine)) {
			select {
			case s.kaEcho <- struct{}{}:
			default:
			}
			continue
		}
		var f api.SessionFrame
		if err := json.Unmarshal(line, &f); err != nil {
			s.close(fmt.Errorf("decode a frame: %w", err))
			break
		}
		if first {
			first = false
			if f.Type != api.FrameWelcome {
				welcomed <- fmt.Errorf("first frame %q, want welcome", f.Type)
				return
			}
			if f.Reply != nil {
				s.welcome = *f.Reply
			}
			s.keepalive.Store(int64(api.DefaultKeepalive))
			s.setKeepalive(f.KeepaliveS)
			welcomed <- nil
			continue
		}
		switch f.Type {
		case api.FrameKeepalive:
			// The server asks for another period (it holds more sessions).
			s.setKeepalive(f.KeepaliveS)
		case api.FrameOffer:
			if f.Offer != nil && s.onOffer != nil {
				s.onOffer(s, *f.Offer)
			}
		case api.FrameReply:
			s.mu.Lock()
			ch := s.pending[f.Seq]
			delete(s.pending, f.Seq)
			s.mu.Unlock()
			if ch != nil {
				ch <- f
			}
		case api.FrameBye:
			msg := "the server ended the session"
			if f.Error != nil {
				msg += ": " + f.Error.Error
			}
			s.close(&api.Error{Status: f.Status, Message: msg})
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	if first {
		welcomed <- fmt.Errorf("no welcome: %w", err)
	}
	s.close(fmt.Errorf("read: %w", err))
}

// close ends the session with err (the first reason wins).
func (s *Session) close(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
		s.pw.CloseWithError(err)
		s.body.Close()
	})
}

// Close ends the session.
func (s *Session) Close() { s.close(errors.New("closed by the agent")) }

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (nil while it is open).
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// KeepalivePeriod is the keep-alive period the server asks for now.
func (s *Session) KeepalivePeriod() time.Duration { return time.Duration(s.keepalive.Load()) }

// minKeepalive is the shortest period a server may ask for: a shorter
// one is taken as this (a keep-alive is a write and a wake-up).
const minKeepalive = 100 * time.Millisecond

// setKeepalive takes the period the server asks for, in seconds; none (0
// or less, or not a number) leaves the period as it is.
func (s *Session) setKeepalive(sec float64) {
	if !(sec > 0) || sec > float64(math.MaxInt64/int64(time.Second)) {
		return
	}
	s.keepalive.Store(int64(max(time.Duration(sec*float64(time.Second)), minKeepalive)))
}

// Welcome is the server's reply to the hello heartbeat.
func (s *Session) Welcome() api.HeartbeatReply { return s.welcome }

func (s *Session) closedErr() error {
	return fmt.Errorf("%w: %w", ErrSessionClosed, s.err)
}

// writeLine sends one frame's line.
func (s *Session) writeLine(line []byte) error {
	select {
	case <-s.done:
		return s.closedErr()
	default:
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.pw.Write(line); err != nil {
		s.close(fmt.Errorf("write: %w", err))
		return s.closedErr()
	}
	return nil
}

func (s *Session) send(f api.SessionFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	return s.writeLine(append(b, '\n'))
}

// call sends a request frame and waits for its reply; a refusal is an
// *api.Error with the status the REST endpoint would answer.
func (s *Session) call(ctx context.Context, f api.SessionFrame) (api.SessionFrame, error) {
	ch := make(chan api.SessionFrame, 1)
	s.mu.Lock()
	s.seq++
	f.Seq = s.seq
	s.pending[f.Seq] = ch
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		delete(s.pending, f.Seq)
		s.mu.Unlock()
	}
	if err := s.send(f); err != nil {
		drop()
		return api.SessionFrame{}, err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return r, &api.Error{Status: r.Status, Field: r.Error.Field, Message: strings.TrimPrefix(r.Error.Error, r.Error.Field+": ")}
		}
		return r, nil
	case <-s.done:
		drop()
		return api.SessionFrame{}, s.closedErr()
	case <-ctx.Done():
		drop()
		return api.SessionFrame{}, fmt.Errorf("session %s: %w", f.Type, ctx.Err())
	}
}

// Keepalive sends a keep-alive and waits for the server's echo; it returns
// the round trip. One keep-alive at a time (the session's keep-alive loop).
func (s *Session) Keepalive(ctx context.Context) (time.Duration, error) {
	select { // an echo left over from a keep-alive that timed out
	case <-s.kaEcho:
	default:
	}
	t0 := time.Now()
	if err := s.writeLine([]byte(api.KeepaliveLine + "\n")); err != nil {
		return 0, err
	}
	select {
	case <-s.kaEcho:
		return time.Since(t0), nil
	case <-s.done:
		return 0, s.closedErr()
	case <-ctx.Done():
		return 0, fmt.Errorf("keep-alive: %w", ctx.Err())
	}
}

// Pull tells the server the agent has room for tasks: its next offer of
// tasks answers it.
func (s *Session) Pull() error { return s.send(api.SessionFrame{Type: api.FramePull}) }

// Ack tells the server the agent holds these offered tasks.
func (s *Session) Ack(taskIDs []string) error {
	if len(taskIDs) == 0 {
		return nil
	}
	return s.send(api.SessionFrame{Type: api.FrameAck, TaskIDs: taskIDs})
}

// Heartbeat sends the agent's heartbeat again (its lists changed).
func (s *Session) Heartbeat(ctx context.Context, hb api.Heartbeat) (api.HeartbeatReply, error) {
	r, err := s.call(ctx, api.SessionFrame{Type: api.FrameHeartbeat, Heartbeat: &hb})
	if err != nil || r.Reply == nil {
		return api.HeartbeatReply{}, err
	}
	return *r.Reply, nil
}

// Start tells the server the agent started the task.
func (s *Session) Start(ctx context.Context, taskID string) error {
	_, err := s.call(ctx, api.SessionFrame{Type: api.FrameStart, TaskID: taskID})
	return err
}

// Serving answers a server request.
func (s *Session) Serving(ctx context.Context, taskID string, sv api.Serving) error {
	_, err := s.call(ctx, api.SessionFrame{Type: api.FrameServing, TaskID: taskID, Serving: &sv})
	return err
}

// Report delivers a task's result.
func (s *Session) Report(ctx context.Context, rep api.Report) (api.ReportReply, error) {
	r, err := s.call(ctx, api.SessionFrame{Type: api.FrameReport, Report: &rep})
	if err != nil {
		return api.ReportReply{}, err
	}
	if r.Reported == nil {
		return api.ReportReply{}, errors.New("session report: the reply holds no report acknowledgement")
	}
	return *r.Reported, nil
}

// SessionLoop is what HoldSession needs: the agent's pod uid and hello
// heartbeat, and what to call as sessions open, carry offers and end.
type SessionLoop struct {
	PodUID string
	// Hello builds the heartbeat each new session opens with.
	Hello   func() api.Heartbeat
	OnOffer func(*Session, api.FetchReply)
	// OnUp is called when a session was welcomed; OnDown when one ended
	// or could not be opened, with the reason; held says the session had
	// lasted sessionHeld (30 s) or more: one that could not be opened, or
	// ended sooner (a proxy that cannot carry it), was not held.
	OnUp   func(*Session)
	OnDown func(err error, held bool)
	// OnKeepalive, when set, gets each keep-alive's round trip (or error).
	OnKeepalive func(rtt time.Duration, err error)
	// BackoffMin and BackoffMax bound the reconnect back-off (1 s and
	// 30 s when 0); Rand (math/rand/v2's Float64 when nil) jitters it.
	BackoffMin, BackoffMax time.Duration
	Rand                   func() float64
}

// sessionHeld is how long a session must have lasted for the back-off to
// start over.
const sessionHeld = 30 * time.Second

// HoldSession keeps the agent's session open until ctx ends: it opens
// one, sends a keep-alive at once and then every period the server asked
// for (a missing
// echo two periods late ends the session), and after a failure or
// an end waits a jittered exponential back-off before opening another:
// "full jitter", a uniform wait in [0, min(max, min·2^n)), so that a
// server restart meets its agents spread over a second, then two, four...
// instead of all at once. The back-off starts over after a session that
// lasted 30 s or carried a keep-alive echo (the path holds sessions; the
// server or replica it ended with died or restarted); one that ended
// before any echo does not reset it. A server without sessions
// (SessionUnsupported) is tried again after the longest back-off.
func (c *Client) HoldSession(ctx context.Context, l SessionLoop) {
	if l.BackoffMin <= 0 {
		l.BackoffMin = time.Second
	}
	if l.BackoffMax <= 0 {
		l.BackoffMax = 30 * time.Second
	}
	if l.Rand == nil {
		l.Rand = randFloat
	}
	attempt := 0
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		s, err := c.OpenSession(octx, l.PodUID, l.Hello(), l.OnOffer)
		cancel()
		wait := time.Duration(l.Rand() * float64(min(l.BackoffMax, l.BackoffMin<<min(attempt, 16))))
		attempt++
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if SessionUnsupported(err) {
				wait = l.BackoffMax
			}
			if l.OnDown != nil {
				l.OnDown(err, false)
			}
		} else {
			opened := time.Now()
			if l.OnUp != nil {
				l.OnUp(s)
			}
			echoed, err := keepSession(ctx, s, l.OnKeepalive)
			s.Close()
			if ctx.Err() != nil {
				return
			}
			held := time.Since(opened) >= sessionHeld
			if l.OnDown != nil {
				l.OnDown(err, held)
			}
			// A session that carried a keep-alive both ways proved the
			// path holds sessions: the back-off starts over, so an agent
			// whose server replica died reconnects within a second or
			// two, however many sessions it had before. One that ended
			// before any echo (a proxy that cannot carry it) keeps
			// backing off.
			if held || echoed {
				attempt = 1
				wait = time.Duration(l.Rand() * float64(l.BackoffMin))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// keepSession sends keep-alives until the session ends, and says why and
// whether a keep-alive was echoed. The first goes out as the session
// opens: its echo proves within a round trip that the path carries
// sessions (the back-off then starts over when the session ends), not
// only after a period (10 s by default). A period the server changes
// while the session is open is taken at the next keep-alive.
func keepSession(ctx context.Context, s *Session, onKA func(time.Duration, error)) (echoed bool, err error) {
	period := s.KeepalivePeriod()
	t := time.NewTicker(period)
	defer t.Stop()
	first := make(chan struct{}, 1)
	first <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return echoed, ctx.Err()
		case <-s.Done():
			return echoed, s.Err()
		case <-first:
		case <-t.C:
		}
		if p := s.KeepalivePeriod(); p != period {
			period = p
			t.Reset(period)
		}
		// Two periods: the server ends a session silent for two periods
		// and a second, so on a starved machine the agent does not give up
		// on a session the server still holds, and a server that vanished
		// without closing the connection is left within two periods.
		kctx, cancel := context.WithTimeout(ctx, 2*period)
		rtt, err := s.Keepalive(kctx)
		cancel()
		if onKA != nil && ctx.Err() == nil {
			onKA(rtt, err)
		}
		if err != nil {
			s.close(fmt.Errorf("keep-alive: %w", err))
			return echoed, err
		}
		echoed = true
	}
}

var randFloat = rand.Float64
