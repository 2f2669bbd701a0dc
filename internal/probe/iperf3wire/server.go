package iperf3wire

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Server serves iperf3 clients on a cnperf responder's port. It is a
// engine.Handler that implements engine.Foreign: the responder hands it the
// TCP connections that open with a cookie and the datagrams without a
// cnperf header. Unlike iperf3's own server it serves several tests at
// once; their data connections are told apart by the cookie, UDP streams by
// the client's address (see docs/probes.md).
type Server struct {
	mu       sync.Mutex
	log      *slog.Logger
	udp      *net.UDPConn
	pending  map[string]*session // cookie → test waiting for its TCP streams
	udpWait  []*session          // tests waiting for UDP streams, oldest first
	udpPeers map[netip.AddrPort]*udpPeer
}

// NewServer returns an iperf3 server to add to a responder's handlers.
func NewServer() *Server {
	return &Server{log: slog.New(slog.DiscardHandler), pending: map[string]*session{}, udpPeers: map[netip.AddrPort]*udpPeer{}}
}

// Kind names the handler; cnperf's own clients never ask for it.
func (s *Server) Kind() string { return "iperf3" }

// Serve refuses a cnperf hello for "iperf3": iperf3 speaks its own protocol.
func (s *Server) Serve(context.Context, *engine.Session) error {
	return errors.New("iperf3 clients speak iperf3's protocol on this port, not cnperf's")
}

// Claims reports whether pre can open an iperf3 cookie.
func (s *Server) Claims(pre [4]byte) bool { return IsCookieStart(pre[:]) }

// Attach takes the responder's UDP socket and logger.
func (s *Server) Attach(udp *net.UDPConn, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.udp = udp
	if log != nil {
		s.log = log
	}
}

// udpPeer is one UDP stream of a test, by the client's address.
type udpPeer struct {
	sess *session
	recv *udpRecv // nil when the server sends
}

// dataConn is a test's TCP data connection and its place in the
// responder's accept order.
type dataConn struct {
	net.Conn
	seq uint64
}

// session is one iperf3 test.
type session struct {
	cookie  string
	peerIP  netip.Addr
	p       Params
	data    chan dataConn
	udpIn   chan netip.AddrPort
	done    chan struct{}
	running atomic.Bool
}

// ServeConn serves a connection that opened with pre: a new test's control
// connection, or a data connection of a test waiting for its streams. Its
// set-up (the cookie, a new test's parameters) is read under the
// responder's deadline for admission; admitted is called once a data
// connection names a waiting test or a test's parameters are accepted.
func (s *Server) ServeConn(ctx context.Context, c net.Conn, pre [4]byte, admitted func()) {
	cookie := make([]byte, CookieSize)
	copy(cookie, pre[:])
	if _, err := io.ReadFull(c, cookie[len(pre):]); err != nil || !validCookie(cookie) {
		s.log.Debug("iperf3: no cookie", "remote", c.RemoteAddr(), "err", err)
		return
	}
	key := string(cookie[:CookieSize-1])
	s.mu.Lock()
	sess := s.pending[key]
	s.mu.Unlock()
	if sess != nil {
		admitted()
		_ = c.SetReadDeadline(time.Time{})
		select {
		case sess.data <- dataConn{c, engine.AcceptSeq(ctx)}:
			<-sess.done // the session owns c until it ends
		case <-sess.done:
		case <-ctx.Done():
		}
		return
	}
	s.serveTest(ctx, c, key, admitted)
}

// RefuseConn refuses a test on a responder that serves only scheduled
// tests (engine.ForeignRefuser): iperf3 has no place for a test key, so
// the client gets iperf3's error state with "test authorization failed".
func (s *Server) RefuseConn(c net.Conn, pre [4]byte, why string) {
	cookie := make([]byte, CookieSize)
	copy(cookie, pre[:])
	// Read the whole cookie first (under the responder's deadline for
	// admission): closing with unread data would reset the connection and
	// lose the error.
	if _, err := io.ReadFull(c, cookie[len(pre):]); err != nil {
		return
	}
	s.log.Info("iperf3 test refused", "remote", c.RemoteAddr(), "err", why)
	_ = ctrl{c}.writeError(errAuthTest, 0)
}

// ClaimsPacket reports whether a datagram without a cnperf header is
// iperf3's: a UDP stream's 4-byte connect message, or data from a UDP peer
// of a running test (engine.PacketClaimer; the rest goes to the responder's
// STAMP reflector).
func (s *Server) ClaimsPacket(pkt []byte, from netip.AddrPort) bool {
	if len(pkt) == 4 {
		if m := binary.NativeEndian.Uint32(pkt); m == udpConnectMsg || m == 123456789 {
			return true
		}
	}
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udpPeers[from] != nil
}

// Packet takes a datagram without a cnperf header: a UDP stream's connect
// message or data.
func (s *Server) Packet(pkt []byte, from netip.AddrPort, rx engine.RxInfo) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	s.mu.Lock()
	peer := s.udpPeers[from]
	if peer == nil && len(pkt) == 4 {
		if m := binary.NativeEndian.Uint32(pkt); m == udpConnectMsg || m == 123456789 {
			for _, sess := range s.udpWait {
				if sess.peerIP == from.Addr() {
					select {
					case sess.udpIn <- from:
					default:
					}
					break // the oldest test from that host takes it
				}
			}
		}
	}
	s.mu.Unlock()
	if peer == nil || peer.recv == nil || !peer.sess.running.Load() {
		return
	}
	arrival := time.Now()
	if rx.KernelNs > 0 {
		arrival = time.Unix(0, rx.KernelNs)
	}
	peer.recv.add(pkt, arrival)
}

// refuse sends iperf3's error state for err and logs it.
func (s *Server) refuse(cc ctrl, log *slog.Logger, err error) {
	code, errno := errUnsupported, int32(0)
	var rf *refusal
	var sr *sysRefusal
	switch {
	case errors.As(err, &sr):
		code, errno = sr.code, int32(sr.errno)
	case errors.As(err, &rf):
		code = rf.code
	}
	log.Info("iperf3 test refused", "err", err)
	_ = cc.writeError(code, errno)
}

// stream is one data stream on the server's side.
type stream struct {
	id     int
	sender bool           // the server sends on it
	conn   net.Conn       // tcp
	peer   netip.AddrPort // udp
	recv   *udpRecv       // udp, server receives
	bytes  atomic.Uint64  // tcp both ways, udp sent
	pkts   atomic.Int64   // udp sent
	sock   tcpSockInfo    // tcp: what the socket holds
	// Counts at the end of -O's omitted seconds (iperf_reset_stats).
	omitBytes   uint64
	omitRetrans int64
}

// testClock is when a test's counted part began: its start, or the end
// of -O's omitted seconds. The omit timer and the results read it.
type testClock struct {
	mu        sync.Mutex
	countFrom time.Time
}

func (c *testClock) from() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.countFrom
}

// resetStats ends the omitted seconds as iperf_reset_stats does: what was
// sent or received so far no longer counts, UDP jitter starts afresh, and
// the figures' clock restarts.
func resetStats(clock *testClock, streams []*stream) {
	clock.mu.Lock()
	defer clock.mu.Unlock()
	clock.countFrom = time.Now()
	for _, st := range streams {
		st.omitBytes = st.bytes.Load()
		if st.recv != nil {
			st.recv.resetOmit()
		}
		if st.sender && st.conn != nil {
			st.omitRetrans, _ = tcp.Retransmits(st.conn)
		}
	}
}

// testLimit is how long the server waits for TEST_END once the test runs:
// the test's time, its omitted seconds and iperf3's grace; a test that ends
// by bytes or blocks (-n, -k) has no time and is held to maxTime.
func testLimit(p Params) time.Duration {
	t := p.Time
	if t == 0 {
		t = maxTime
	}
	return time.Duration(t+p.Omit)*time.Second + grace
}

func (s *Server) serveTest(ctx context.Context, c net.Conn, cookie string, admitted func()) {
	cc := ctrl{c}
	defer closeOnDone(ctx, c)()
	log := s.log.With("iperf3_client", c.RemoteAddr().String())
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if err := cc.writeState(stateParamExchange); err != nil {
		log.Debug("iperf3", "err", err)
		return
	}
	// The parameters are read before the test is admitted: under the
	// responder's deadline for admission, and held to maxParamsJSON.
	var body map[string]json.RawMessage
	if err := cc.readJSONMax(&body, maxParamsJSON); err != nil {
		s.refuse(cc, log, &refusal{errRecvParams, err.Error()})
		return
	}
	p, err := ParseParams(body)
	if err != nil {
		s.refuse(cc, log, err)
		return
	}
	admitted()
	_ = c.SetReadDeadline(time.Time{})
	peerIP := netip.Addr{}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		peerIP = ta.AddrPort().Addr().Unmap()
	}
	sess := &session{cookie: cookie, peerIP: peerIP, p: p, data: make(chan dataConn),
		udpIn: make(chan netip.AddrPort, p.Conns()), done: make(chan struct{})}
	if p.UDP && s.udp == nil {
		s.refuse(cc, log, &refusal{errProtocol, "this responder has no UDP socket"})
		return
	}
	doc := newServerDoc(p, c, cookie)
	s.register(sess)
	defer s.unregister(sess)
	log = log.With("proto", map[bool]string{true: "udp", false: "tcp"}[p.UDP], "streams", p.Parallel,
		"reverse", p.Reverse, "bidir", p.Bidir, "time_s", p.Time, "client_version", p.ClientVer)
	if err := cc.writeState(stateCreateStreams); err != nil {
		log.Debug("iperf3", "err", err)
		return
	}
	streams, err := s.collectStreams(ctx, sess)
	defer func() {
		for _, st := range streams {
			if st.conn != nil {
				_ = st.conn.Close()
			}
		}
	}()
	if err != nil {
		log.Info("iperf3 test failed", "err", err)
		_ = cc.writeError(errStreamID, 0)
		return
	}
	if err := s.setupStreams(p, streams, doc, log); err != nil {
		s.refuse(cc, log, err)
		return
	}
	if err := cc.writeState(stateTestStart); err != nil {
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	cpu0 := engine.SampleCPU()
	start := time.Now()
	clock := &testClock{countFrom: start}
	sess.running.Store(true)
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runStream(runCtx, sess, st)
		}()
	}
	ivs := newIntervalLog(p, streams, clock, start)
	if p.ServerOutput {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ivs.run(runCtx)
		}()
	}
	if p.Omit > 0 {
		omit := time.AfterFunc(time.Duration(p.Omit)*time.Second, func() { resetStats(clock, streams) })
		defer omit.Stop()
	}
	if err := cc.writeState(stateTestRunning); err != nil {
		stop()
		wg.Wait()
		return
	}
	state, err := cc.readState(testLimit(p))
	end := time.Now()
	sess.running.Store(false)
	var intervals []iperf3json.Interval
	if p.ServerOutput {
		intervals = ivs.finish(end)
	}
	clock.mu.Lock() // the omit timer may not reset the figures from here on
	countFrom := clock.countFrom
	res := results{SenderHasRetransmits: -1}
	switch {
	case p.TCP && (p.Reverse || p.Bidir):
		res.SenderHasRetransmits = 1
	case p.Reverse || p.Bidir:
		res.SenderHasRetransmits = 0
	}
	elapsed := end.Sub(countFrom).Seconds()
	snap := make([]streamResult, len(streams))
	for i, st := range streams {
		snap[i] = streamResult{ID: float64(st.id), Bytes: float64(st.bytes.Load() - st.omitBytes), Retransmits: -1, StartTime: 0, EndTime: elapsed}
		if st.recv != nil {
			u := st.recv.snapshot()
			snap[i].Bytes, snap[i].Jitter = float64(u.bytes), u.jitter
			snap[i].Errors, snap[i].Packets = float64(u.lost), float64(u.highest)
		} else if p.UDP {
			snap[i].Packets = float64(st.pkts.Load())
		}
		if st.sender && p.TCP {
			if n, err := tcp.Retransmits(st.conn); err == nil {
				snap[i].Retransmits = float64(n - st.omitRetrans)
			}
		}
	}
	clock.mu.Unlock()
	stop()
	for _, st := range streams {
		if st.conn != nil {
			_ = st.conn.SetDeadline(time.Now())
		}
	}
	wg.Wait()
	// Close the data connections now, as iperf3's server does on
	// TEST_END. A stock client in -R mode reads a whole block with blocking
	// reads while it drains; a block the deadline above cut short would
	// keep it waiting for bytes that never come, deaf to EXCHANGE_RESULTS,
	// until the control connection's step timeout ended the test. The
	// close ends that read with EOF.
	for _, st := range streams {
		if st.conn != nil {
			_ = st.conn.Close()
		}
	}
	cpu1 := engine.SampleCPU()
	if err != nil || state != stateTestEnd {
		log.Info("iperf3 test ended without TEST_END", "state", state, "err", err)
		return
	}
	res.setCPU(engine.CPUUseBetween(cpu0, cpu1))
	if p.TCP {
		res.CongestionUsed = doc.congestion
	}
	res.Streams = snap
	if err := cc.writeState(stateExchangeResults); err != nil {
		return
	}
	var theirs results
	if err := cc.readJSON(&theirs); err != nil {
		log.Info("iperf3 results", "err", err) // still send ours: the client waits for them
	}
	if p.ServerOutput {
		out, err := json.Marshal(doc.finish(streams, snap, intervals, res, theirs, start, countFrom, end))
		if err != nil {
			log.Info("iperf3 server output", "err", err)
		} else {
			res.ServerOutputJSON = out
		}
	}
	if err := cc.writeJSON(res); err != nil {
		return
	}
	if err := cc.writeState(stateDisplayResults); err != nil {
		return
	}
	_, _ = cc.readState(stepTimeout) // IPERF_DONE, then the client closes
	var total float64
	for _, r := range snap {
		total += r.Bytes
	}
	log.Info("iperf3 test served", "seconds", elapsed, "bytes", total, "bits_per_second", total*8/elapsed,
		"congestion", doc.congestion, "tos", p.TOS)
}

// setupStreams applies the test's socket options to its data streams
// before TEST_START, so that an option the kernel refuses ends the test
// with iperf3's error for it; what the sockets hold goes to doc.
func (s *Server) setupStreams(p Params, streams []*stream, doc *serverDoc, log *slog.Logger) error {
	for _, st := range streams {
		if st.conn == nil {
			continue
		}
		info, warnings, err := setupTCPStream(st.conn, p)
		for _, w := range warnings {
			log.Warn("iperf3: " + w)
		}
		if err != nil {
			return err
		}
		st.sock = info
		doc.addTCP(st, info)
	}
	if p.UDP {
		for _, st := range streams {
			doc.addUDP(st, s.udp.LocalAddr())
		}
		if p.Window > 0 {
			snd, rcv, err := growUDPBuffers(s.udp, p.Window)
			if err != nil {
				return err
			}
			doc.sndbuf, doc.rcvbuf = snd, rcv
		}
	}
	return nil
}

func (s *Server) register(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess.p.UDP {
		s.udpWait = append(s.udpWait, sess)
	} else {
		s.pending[sess.cookie] = sess
	}
}

// unregister forgets the session everywhere and ends its data connections'
// waits.
func (s *Server) unregister(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopWaiting(sess)
	for a, p := range s.udpPeers {
		if p.sess == sess {
			delete(s.udpPeers, a)
		}
	}
	close(sess.done)
}

// stopWaiting takes the session off the lists of tests waiting for
// streams; s.mu is held.
func (s *Server) stopWaiting(sess *session) {
	if s.pending[sess.cookie] == sess {
		delete(s.pending, sess.cookie)
	}
	for i, w := range s.udpWait {
		if w == sess {
			s.udpWait = append(s.udpWait[:i:i], s.udpWait[i+1:]...)
			break
		}
	}
}

// collectStreams waits for the test's data connections (TCP) or connect
// datagrams (UDP), in the order iperf3's server accepts them.
func (s *Server) collectStreams(ctx context.Context, sess *session) ([]*stream, error) {
	timer := time.NewTimer(stepTimeout)
	defer timer.Stop()
	var streams []*stream
	var seqs []uint64
	defer func() {
		s.mu.Lock()
		s.stopWaiting(sess)
		s.mu.Unlock()
	}()
	// TCP streams are put in the order the responder accepted them, which
	// is the order the client opened them (each connect completes before
	// the next begins), whatever order their cookies were read in: with
	// --bidir that order says which streams the server sends on.
	defer func() {
		if len(seqs) != len(streams) {
			return
		}
		sort.Stable(byAccept{streams, seqs})
		for i, st := range streams {
			st.id, st.sender = streamID(i), sess.p.ServerSends(i)
		}
	}()
	for len(streams) < sess.p.Conns() {
		st := &stream{id: streamID(len(streams)), sender: sess.p.ServerSends(len(streams))}
		select {
		case dc := <-sess.data:
			st.conn = dc.Conn
			seqs = append(seqs, dc.seq)
		case from := <-sess.udpIn:
			st.peer = from
			peer := &udpPeer{sess: sess}
			if !st.sender {
				st.recv = &udpRecv{counters64: sess.p.Counters64}
				peer.recv = st.recv
			}
			s.mu.Lock()
			s.udpPeers[from] = peer
			s.mu.Unlock()
			var reply [4]byte
			binary.NativeEndian.PutUint32(reply[:], udpConnectReply)
			if _, err := s.udp.WriteToUDPAddrPort(reply[:], from); err != nil {
				return streams, fmt.Errorf("iperf3: UDP stream reply to %s: %w", from, err)
			}
		case <-timer.C:
			return streams, fmt.Errorf("iperf3: %d of %d streams came within %v", len(streams), sess.p.Conns(), stepTimeout)
		case <-ctx.Done():
			return streams, ctx.Err()
		}
		streams = append(streams, st)
	}
	return streams, nil
}

// byAccept sorts a test's TCP streams by their accept order.
type byAccept struct {
	streams []*stream
	seqs    []uint64
}

func (b byAccept) Len() int           { return len(b.streams) }
func (b byAccept) Less(i, j int) bool { return b.seqs[i] < b.seqs[j] }
func (b byAccept) Swap(i, j int) {
	b.streams[i], b.streams[j] = b.streams[j], b.streams[i]
	b.seqs[i], b.seqs[j] = b.seqs[j], b.seqs[i]
}

// runStream moves the stream's data until ctx ends.
func (s *Server) runStream(ctx context.Context, sess *session, st *stream) {
	p := sess.p
	switch {
	case p.TCP && !st.sender:
		recvTCP(st.conn, p, &st.bytes, &sess.running)
	case p.TCP:
		sendTCP(ctx, st.conn, p, &st.bytes)
	case st.sender: // udp, the server sends, marking each datagram with -S's TOS
		var oob []byte
		if p.TOS != 0 {
			oob = udpio.TOSCmsg(p.TOS, !st.peer.Addr().Unmap().Is4())
		}
		write := func(b []byte) (int, error) {
			n, _, err := s.udp.WriteMsgUDPAddrPort(b, oob, st.peer)
			return n, err
		}
		sendUDP(ctx, p, &st.bytes, &st.pkts, write, func(err error) bool {
			return errors.Is(err, net.ErrClosed)
		})
	default: // udp, the server receives: Packet counts
		<-ctx.Done()
	}
}
