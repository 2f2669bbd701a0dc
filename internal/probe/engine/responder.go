package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// A Handler serves one probe kind on the responder side. Serve owns the
// session's control connection until it returns; the responder closes it
// afterwards and forgets the session.
type Handler interface {
	Kind() string
	Serve(ctx context.Context, s *Session) error
}

// RxInfo is what the kernel said about a received datagram.
type RxInfo struct {
	TOS      int   // TOS byte on arrival, valid when TOSOK
	TOSOK    bool  //
	KernelNs int64 // kernel receive timestamp (ns since the epoch), 0 if absent
	// Drops is the shared socket's cumulative count of datagrams the kernel
	// dropped for a full receive buffer (SO_RXQ_OVFL), valid when DropsOK.
	Drops   uint32
	DropsOK bool
}

// Foreign is implemented by a Handler that serves another tool's protocol
// on the responder's port (iperf3's: internal/probe/iperf3wire). The
// responder gives it the TCP connections whose first 4 bytes it Claims and
// the datagrams that carry no cnperf header.
type Foreign interface {
	// Claims reports whether a connection opening with pre is its.
	Claims(pre [4]byte) bool
	// Attach hands over the responder's UDP socket (for replies; do not
	// close it or read from it) and logger, before anything is served.
	Attach(udp *net.UDPConn, log *slog.Logger)
	// ServeConn owns c, whose first bytes pre were read, until it returns.
	// c's read deadline is the end of its set-up (the responder's hello
	// timeout): ServeConn must not extend it, nor read more than a few KB,
	// before it calls admitted (once the set-up is accepted); the
	// responder counts c as awaiting admission until then.
	ServeConn(ctx context.Context, c net.Conn, pre [4]byte, admitted func())
	// Packet handles a datagram without cnperf's header. It runs on the
	// responder's UDP reader: it must be quick and must not keep pkt.
	Packet(pkt []byte, from netip.AddrPort, rx RxInfo)
}

// PacketFunc handles one datagram of a session. It runs on the responder's
// UDP reader: it must be quick and must not keep pkt.
type PacketFunc func(pkt []byte, from netip.AddrPort, rx RxInfo)

// Session is one test on the responder.
type Session struct {
	ID     SessionID
	Kind   string
	Spec   probe.Spec
	Ctrl   *ControlConn
	Remote net.Addr
	Log    *slog.Logger

	data chan DataConn
	r    *Responder
}

// DataConn is a TCP data connection of a session.
type DataConn struct {
	net.Conn
	Stream int
}

// AcceptData waits for the session's next data connection.
func (s *Session) AcceptData(ctx context.Context) (DataConn, error) {
	select {
	case c := <-s.data:
		return c, nil
	case <-ctx.Done():
		return DataConn{}, fmt.Errorf("wait for data connection: %w", ctx.Err())
	}
}

// HandlePackets routes the session's datagrams to fn until the session ends.
// Datagrams that arrive before it is called are dropped, so a kind's
// protocol must make the client wait for the handler's go-ahead (MsgReady,
// sent after HandlePackets) before it sends datagrams.
func (s *Session) HandlePackets(fn PacketFunc) {
	s.r.packetFns.Store(s.ID, fn)
}

// WriteTo sends a datagram from the responder's UDP port.
func (s *Session) WriteTo(b []byte, to netip.AddrPort) error {
	_, err := s.r.udp.WriteToUDPAddrPort(b, to)
	return err
}

// UDPConn returns the responder's shared UDP socket (for engines that send
// in batches from the same port). Do not close it or read from it.
func (s *Session) UDPConn() *net.UDPConn { return s.r.udp }

// UnclaimedFunc handles a datagram that opens with no cnperf header and
// that the Foreign handler does not claim: another protocol sharing the
// responder's UDP port (STAMP, which has no session set-up to announce
// itself). It runs on the responder's UDP reader, must be quick and must
// not keep pkt; reply sends a datagram from the responder's port with a
// TOS byte.
type UnclaimedFunc func(pkt []byte, from netip.AddrPort, rx RxInfo, reply func(b []byte, tos int) error)

// PacketClaimer is implemented by a Foreign handler that can tell its own
// datagrams from others, so that the rest can go to the UnclaimedFunc.
type PacketClaimer interface {
	ClaimsPacket(pkt []byte, from netip.AddrPort) bool
}

// UDPReadMode says how the responder's shared UDP reader takes datagrams
// from the kernel: "gro" (recvmmsg with UDP GRO), "mmsg" or "plain".
func (s *Session) UDPReadMode() string {
	if m, ok := s.r.udpReadMode.Load().(string); ok {
		return m
	}
	return "unknown"
}

// Responder serves every registered probe kind on one TCP and one UDP port.
type Responder struct {
	log      *slog.Logger
	handlers map[string]Handler
	foreign  Foreign // nil unless a handler serves another protocol

	tcp *net.TCPListener
	udp *net.UDPConn
	// udpShared: sessions may open connected sockets on udp's port
	// (PeerSocket).
	udpShared bool

	mu       sync.Mutex // guards sessions and conns
	sessions map[SessionID]*Session
	conns    map[net.Conn]struct{}

	// keys, when set, admits only sessions whose hello carries a key it
	// accepts (RequireKeys); nil serves everyone, like iperf3 -s.
	keys probe.KeyChecker
	// pending gates the connections awaiting admission.
	pending *admission

	packetFns sync.Map      // SessionID → PacketFunc
	unclaimed UnclaimedFunc // STAMP's reflector, when set
	// udpReadMode is how the shared UDP reader reads ("gro", "mmsg",
	// "plain"), once it has started.
	udpReadMode atomic.Value

	wg sync.WaitGroup
}

// NewResponder returns a responder for the given handlers.
func NewResponder(log *slog.Logger, hs ...Handler) *Responder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Responder{log: log, handlers: map[string]Handler{}, sessions: map[SessionID]*Session{}, conns: map[net.Conn]struct{}{},
		pending: newAdmission()}
	for _, h := range hs {
		r.handlers[h.Kind()] = h
		if f, ok := h.(Foreign); ok {
			r.foreign = f
		}
	}
	return r
}

// RequireKeys makes the responder serve only sessions whose hello carries
// a test key kc admits, checked once per session (never per packet).
// Connections of the Foreign handler (iperf3, which has no place for a
// key) are refused with its own error when it is a ForeignRefuser, else
// closed. Call it before Serve.
func (r *Responder) RequireKeys(kc probe.KeyChecker) { r.keys = kc }

// ForeignRefuser is implemented by a Foreign handler that can refuse a
// connection in its own protocol's terms (iperf3's error state) when the
// responder requires test keys.
type ForeignRefuser interface {
	RefuseConn(c net.Conn, pre [4]byte, why string)
}

// Listen binds the TCP and UDP sockets on addr (HOST:PORT; port 0 picks a
// free port, the same number for both).
func (r *Responder) Listen(ctx context.Context, addr string) error {
	lc := net.ListenConfig{}
	for attempt := 0; ; attempt++ {
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("listen tcp %s: %w", addr, err)
		}
		tl := ln.(*net.TCPListener)
		host, _, _ := net.SplitHostPort(addr)
		port := tl.Addr().(*net.TCPAddr).Port
		opts := SockOpts{RecvTOS: true, RecvTstamp: true}.Control()
		shared := true
		ulc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
			if err := opts(network, address, c); err != nil {
				return err
			}
			_ = c.Control(func(fd uintptr) {
				if err := shareUDPPort(int(fd)); err != nil {
					r.log.Info("udp: sessions share the responder's socket", "err", err)
					shared = false
				}
			})
			return nil
		}}
		pc, err := ulc.ListenPacket(ctx, "udp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			tl.Close()
			_, p, _ := net.SplitHostPort(addr)
			if p == "0" && attempt < 10 {
				continue // the UDP twin of a random TCP port was taken; try another
			}
			return fmt.Errorf("listen udp %s: %w", addr, err)
		}
		uc := pc.(*net.UDPConn)
		_ = uc.SetReadBuffer(8 << 20)
		_ = uc.SetWriteBuffer(8 << 20)
		if shared {
			if err := steerToShared(uc); err != nil {
				r.log.Info("udp: sessions share the responder's socket", "err", err)
				shared = false
			}
		}
		r.tcp, r.udp, r.udpShared = tl, uc, shared
		return nil
	}
}

// Addr returns the bound address (TCP; the UDP port has the same number).
func (r *Responder) Addr() net.Addr { return r.tcp.Addr() }

// Serve accepts connections and datagrams until ctx ends or Close is called.
func (r *Responder) Serve(ctx context.Context) error {
	if r.tcp == nil {
		return errors.New("responder: Serve before Listen")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r.foreign != nil {
		r.foreign.Attach(r.udp, r.log)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.readUDP(ctx)
	}()
	stop := context.AfterFunc(ctx, func() { r.closeSockets() })
	defer stop()
	var seq uint64
	for {
		c, err := r.tcp.Accept()
		if err != nil {
			cancel()
			r.closeSockets()
			r.wg.Wait()
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		src := sourceOf(c)
		if !r.pending.enter(src) {
			// Past the caps: closed at once, unread.
			r.log.Debug("connection refused: too many awaiting admission", "remote", c.RemoteAddr())
			_ = c.Close()
			continue
		}
		r.track(c, true)
		r.wg.Add(1)
		seq++
		cctx := context.WithValue(ctx, acceptSeqKey{}, seq)
		go func() {
			defer r.wg.Done()
			admitted := sync.OnceFunc(func() { r.pending.leave(src) })
			defer admitted()
			r.handleConn(cctx, c, admitted)
		}()
	}
}

// acceptSeqKey keys a connection's place in the responder's accept order.
type acceptSeqKey struct{}

// AcceptSeq returns the place (from 1) of the connection being served in
// the order the responder accepted its connections, which is the order
// the clients' handshakes completed: a Foreign handler whose protocol
// tells a test's streams apart by the order they open (iperf3 --bidir)
// reads it from the context ServeConn gets. 0 means unknown.
func AcceptSeq(ctx context.Context) uint64 {
	n, _ := ctx.Value(acceptSeqKey{}).(uint64)
	return n
}

// Close stops the responder and every session.
func (r *Responder) Close() error {
	r.closeSockets()
	return nil
}

func (r *Responder) closeSockets() {
	if r.tcp != nil {
		_ = r.tcp.Close()
	}
	if r.udp != nil {
		_ = r.udp.Close()
	}
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
}

func (r *Responder) track(c net.Conn, add bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if add {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

// prefaceTimeout bounds the steps of an admitted session's set-up: a data
// connection's hand-over, each clock exchange.
const prefaceTimeout = 10 * time.Second

// handleConn serves a new connection; it calls admitted once the
// connection is admitted, and must neither read more than a few KB nor
// wait past the hello deadline before.
func (r *Responder) handleConn(ctx context.Context, c net.Conn, admitted func()) {
	helloBy := time.Now().Add(helloTimeout)
	_ = c.SetReadDeadline(helloBy)
	var pre [4]byte
	if _, err := io.ReadFull(c, pre[:]); err != nil {
		r.log.Debug("connection without preface", "remote", c.RemoteAddr(), "err", err)
		r.drop(c)
		return
	}
	switch pre {
	case PrefaceControl:
		r.serveControl(ctx, c, helloBy, admitted)
		r.drop(c)
	case PrefaceData:
		var rest [12]byte
		if _, err := io.ReadFull(c, rest[:]); err != nil {
			r.drop(c)
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		var id SessionID
		copy(id[:], rest[0:8])
		stream := int(binary.BigEndian.Uint32(rest[8:12]))
		r.mu.Lock()
		s := r.sessions[id]
		r.mu.Unlock()
		if s == nil {
			r.log.Debug("data connection for unknown session", "session", id, "remote", c.RemoteAddr())
			r.drop(c)
			return
		}
		admitted() // it named a session the responder admitted
		select {
		case s.data <- DataConn{Conn: c, Stream: stream}:
			// The handler owns c now; the responder still closes it on Close.
		case <-time.After(prefaceTimeout):
			r.drop(c)
		case <-ctx.Done():
			r.drop(c)
		}
	default:
		if r.foreign != nil && r.foreign.Claims(pre) {
			if r.keys != nil {
				r.log.Info("session refused", "remote", c.RemoteAddr(), "kind", "iperf3", "err", "a client of another protocol cannot carry a test key")
				if rf, ok := r.foreign.(ForeignRefuser); ok {
					rf.RefuseConn(c, pre, "this responder serves only scheduled tests with a test key")
				}
				r.drop(c)
				return
			}
			r.foreign.ServeConn(ctx, c, pre, admitted)
			r.drop(c)
			return
		}
		r.log.Debug("connection with unknown preface", "remote", c.RemoteAddr())
		r.drop(c)
	}
}

func (r *Responder) drop(c net.Conn) {
	_ = c.Close()
	r.track(c, false)
}

// answerClockSync answers the n time exchanges a hello announced.
func answerClockSync(ctx context.Context, ctrl *ControlConn, n int) error {
	if n > 100 {
		return fmt.Errorf("hello announces %d time exchanges, more than 100", n)
	}
	for i := 0; i < n; i++ {
		sctx, cancel := context.WithTimeout(ctx, prefaceTimeout)
		m, err := ctrl.recvOne(sctx)
		cancel()
		if err != nil {
			return err
		}
		if m.Type != MsgTime {
			return fmt.Errorf("control protocol: want %q message, got %q", MsgTime, m.Type)
		}
		if err := ctrl.Send(ctx, Message{Type: MsgTime, T1: m.T1, T2: time.Now().UnixNano(), BootID: BootID()}); err != nil {
			return err
		}
	}
	return nil
}

// serveControl reads the hello (at most maxHello bytes, by helloBy),
// admits the session if its key and spec pass, and serves it.
func (r *Responder) serveControl(ctx context.Context, c net.Conn, helloBy time.Time, admitted func()) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	ctrl := newResponderControlConn(c)
	hctx, cancel := context.WithDeadline(ctx, helloBy)
	hello, err := ctrl.Expect(hctx, MsgHello)
	cancel()
	if err != nil {
		r.log.Debug("bad hello", "remote", c.RemoteAddr(), "err", err)
		return
	}
	fail := func(err error) {
		r.log.Info("session refused", "remote", c.RemoteAddr(), "kind", hello.Kind, "err", err)
		ctrl.SendError(ctx, err)
	}
	var grant probe.Grant
	if r.keys != nil {
		if grant, err = r.keys.Check(hello.Key, time.Now()); err != nil {
			fail(err)
			return
		}
	}
	h, ok := r.handlers[hello.Kind]
	if !ok {
		fail(fmt.Errorf("this responder does not serve probe kind %q", hello.Kind))
		return
	}
	id, err := ParseSessionID(hello.Session)
	if err != nil {
		fail(err)
		return
	}
	spec := probe.Spec{Kind: hello.Kind}
	if hello.Spec != nil {
		spec = *hello.Spec
		spec.Kind = hello.Kind // the handler is chosen by the hello's kind
	}
	if grant.Bounds != nil {
		if err := grant.Bounds.Admits(spec); err != nil {
			fail(err)
			return
		}
	}
	s := &Session{ID: id, Kind: hello.Kind, Spec: spec, Ctrl: ctrl, Remote: c.RemoteAddr(),
		Log:  r.log.With("session", id.String(), "probe", hello.Kind, "src", c.RemoteAddr().String()),
		data: make(chan DataConn), r: r}
	r.mu.Lock()
	if _, dup := r.sessions[id]; dup {
		r.mu.Unlock()
		fail(fmt.Errorf("session %s already exists", id))
		return
	}
	r.sessions[id] = s
	r.mu.Unlock()
	admitted()
	_ = c.SetReadDeadline(time.Time{})
	ctrl.limit, ctrl.answerTime = 0, true
	defer func() {
		r.mu.Lock()
		delete(r.sessions, id)
		r.mu.Unlock()
		r.packetFns.Delete(id)
	}()
	if end := grant.End(time.Now()); !end.IsZero() {
		// The key bounds the session: at its end the handler's context
		// ends and the control connection closes, whatever the client does.
		bctx, cancel := context.WithDeadline(ctx, end)
		defer cancel()
		fired := make(chan struct{})
		stop := context.AfterFunc(bctx, func() {
			defer close(fired)
			if errors.Is(bctx.Err(), context.DeadlineExceeded) {
				s.Log.Info("session ended at its test key's bound", "end", end)
				sctx, scancel := context.WithTimeout(context.Background(), time.Second)
				ctrl.SendError(sctx, fmt.Errorf("session ended at the bound of its test key (%s)", end.UTC().Format(time.RFC3339)))
				scancel()
			}
			_ = c.Close()
		})
		defer func() {
			if !stop() {
				<-fired // the reason is sent before the connection closes
			}
		}()
		ctx = bctx
	}
	if err := ctrl.Send(ctx, Message{Type: MsgOK, Session: hello.Session, BootID: BootID()}); err != nil {
		return
	}
	if err := answerClockSync(ctx, ctrl, hello.Sync); err != nil {
		s.Log.Debug("clock sync failed", "err", err)
		return
	}
	s.Log.Debug("session start")
	if err := h.Serve(ctx, s); err != nil {
		s.Log.Info("session ended with error", "err", err)
		ctrl.SendError(ctx, err)
		return
	}
	s.Log.Debug("session end")
}
