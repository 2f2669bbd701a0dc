// Package rr is cnperf's request/response engine, like netperf's TCP_RR,
// UDP_RR and TCP_CRR: one transaction at a time, each a request of --size
// bytes answered by a response of the same size (TCP_CRR also opens and
// closes a connection per transaction).
//
// It reports two round-trip times per transaction. app_rtt_ms is what a
// program sees: from just before the request is written to just after the
// response is read, scheduler wake-ups included. rtt_ms is the network's:
// the response's kernel receive timestamp (SO_TIMESTAMPNS) minus the send
// time, less the responder's dwell (its own kernel receive timestamp of the
// request to just before it writes the response), the way TWAMP and STAMP
// subtract the reflector's turnaround. Every figure is a difference of
// readings of one host's clock, so the two ends need no clock agreement,
// and the responder answers whatever address the request came from, so it
// works through NAT.
package rr

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
)

// Transports.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
	ProtoCRR = "crr"
)

// Defaults and bounds.
const (
	DefaultDuration = 10 * time.Second
	DefaultTimeout  = time.Second // per transaction
	DefaultSize     = 64
	// MinSize holds the response's fields: header, sequence, dwell, TOS.
	MinSize     = probe.PacketHeaderLen + 8 + 8 + 4
	MaxSize     = 65000
	MaxDuration = 24 * time.Hour
	ctrlTimeout = 10 * time.Second
)

// Offsets in a request and a response (the same layout over TCP, where the
// packet header's magic and session id frame the message).
const (
	offSeq   = probe.PacketHeaderLen
	offDwell = offSeq + 8
	offTOS   = offDwell + 8
)

// Prober is the client side.
type Prober struct{}

// Name returns "rr".
func (Prober) Name() string { return probe.KindRR }

func proto(s probe.Spec) string {
	if s.Proto == "" {
		return ProtoTCP
	}
	return s.Proto
}

func size(s probe.Spec) int {
	if s.Size > 0 {
		return s.Size
	}
	return DefaultSize
}

// Validate checks the spec.
func (Prober) Validate(s probe.Spec) error {
	var errs []error
	if err := s.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	switch s.Proto {
	case "", ProtoTCP, ProtoUDP, ProtoCRR:
	default:
		errs = append(errs, fmt.Errorf("proto %q: want tcp, udp or crr", s.Proto))
	}
	if s.RateBps != nil && *s.RateBps == 0 {
		errs = append(errs, errors.New("rate 0: rr runs one transaction at a time and has no \"as fast as possible\" rate; leave --rate out for back-to-back transactions, or give a rate in bits/s to space them"))
	}
	if s.Size != 0 && (s.Size < MinSize || s.Size > MaxSize) {
		errs = append(errs, fmt.Errorf("size %d: must be %d-%d bytes", s.Size, MinSize, MaxSize))
	}
	if s.Reverse {
		errs = append(errs, errors.New("reverse: rr measures round trips; there is no direction to reverse"))
	}
	if s.Streams > 1 {
		errs = append(errs, fmt.Errorf("streams %d: rr runs one transaction at a time", s.Streams))
	}
	if s.Duration.D() > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %v: at most %v", s.Duration.D(), MaxDuration))
	}
	return errors.Join(errs...)
}

// gap returns the pause between transactions: --interval, or the spacing
// that makes --rate (bits/s of requests).
func gap(s probe.Spec) time.Duration {
	if s.Interval > 0 {
		return s.Interval.D()
	}
	if s.RateBps != nil && *s.RateBps > 0 {
		return time.Duration(float64(size(s)) * 8 / float64(*s.RateBps) * 1e9)
	}
	return 0
}

// sample is one transaction's figures.
type sample struct {
	rttNs, appNs int64
	tos          int
	tosOK        bool
}

// transport runs transactions.
type transport interface {
	do(ctx context.Context, seq uint64) (sample, error)
	close()
}

// errTimeout marks a transaction that got no response in time (counted
// as lost, not fatal).
var errTimeout = errors.New("no response in time")

// Run measures.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	c, err := probe.Dial(ctx, spec, probe.SockOpts{TOS: spec.TOSByte(), NoDelay: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Ctrl.Expect(ctx, probe.MsgReady); err != nil {
		return nil, fmt.Errorf("rr: %w", err)
	}
	timeout := spec.TimeoutOr(DefaultTimeout)
	var tr transport
	var src string
	switch proto(spec) {
	case ProtoUDP:
		u, err := dialUDP(ctx, spec, c.Session, timeout)
		if err != nil {
			return nil, err
		}
		tr, src = u, u.conn.LocalAddr().String()
	case ProtoTCP:
		t, err := dialTCP(ctx, c, spec, timeout)
		if err != nil {
			return nil, err
		}
		tr, src = t, t.conn.LocalAddr().String()
	case ProtoCRR:
		tr, src = &crrClient{c: c, spec: spec, timeout: timeout}, c.LocalAddr().String()
	}
	defer tr.close()
	// A responder that fails or goes away ends the test: watch the control
	// connection while transactions run.
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	ctrlDone := make(chan error, 1)
	go func() {
		m, err := c.Ctrl.RecvNoDeadline(tctx)
		if err == nil {
			err = fmt.Errorf("control protocol: unexpected %q message", m.Type)
		}
		ctrlDone <- err
		tcancel()
	}()

	res := probe.NewResult(spec, src, c.Ctrl.Conn().RemoteAddr().String(), env.Clock()())
	dur := spec.DurationOr(DefaultDuration)
	if spec.Count > 0 && spec.Duration == 0 {
		dur = MaxDuration
	}
	pause := gap(spec)
	rtt, app := stats.NewRecorder(), stats.NewRecorder()
	var sent, lost int64
	var tos *int
	tosMixed := false
	start := time.Now()
	var runErr error
	for seq := uint64(0); ; seq++ {
		if spec.Count > 0 && sent >= int64(spec.Count) {
			break
		}
		if time.Since(start) >= dur {
			break
		}
		if tctx.Err() != nil {
			runErr = tctx.Err()
			break
		}
		if pause > 0 && seq > 0 {
			next := start.Add(time.Duration(seq) * pause)
			if w := time.Until(next); w > 0 {
				select {
				case <-time.After(w):
				case <-tctx.Done():
					runErr = tctx.Err()
				}
				if runErr != nil {
					break
				}
			}
		}
		sent++
		s, err := tr.do(tctx, seq)
		if errors.Is(err, errTimeout) {
			lost++
			continue
		}
		if err != nil {
			runErr = err
			break
		}
		rtt.Record(s.rttNs)
		app.Record(s.appNs)
		if s.tosOK {
			if tos == nil {
				t := s.tos
				tos = &t
			} else if *tos != s.tos {
				tosMixed = true
			}
		}
	}
	elapsed := time.Since(start)
	if runErr != nil {
		tcancel()
		if cerr := <-ctrlDone; cerr != nil && ctx.Err() == nil && !errors.Is(cerr, context.Canceled) {
			return nil, fmt.Errorf("rr: responder failed during the test: %w (%v)", cerr, runErr)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rr: %w", ctx.Err())
		}
		return nil, fmt.Errorf("rr: transaction %d: %w", sent, runErr)
	}
	tcancel()
	<-ctrlDone
	rctx, cancel := context.WithTimeout(ctx, ctrlTimeout)
	defer cancel()
	_ = c.Ctrl.Send(rctx, probe.Message{Type: probe.MsgStop})
	if rtt.Count() == 0 {
		return nil, fmt.Errorf("rr: no response to any of %d requests within %v each", sent, timeout)
	}
	res.DurationS = elapsed.Seconds()
	r, a := rtt.Summary(1e-6), app.Summary(1e-6)
	res.RTTms, res.AppRTTms = &r, &a
	res.LossPct = probe.Float(stats.LossPct(lost, sent))
	res.TransactionsPerS = probe.Float(float64(rtt.Count()) / elapsed.Seconds())
	if tos != nil {
		res.SetDSCPReceived(*tos)
		if tosMixed {
			res.Notes = append(res.Notes, "requests arrived with different DSCP marks; dscp_received is the first one's")
		}
	} else {
		res.Notes = append(res.Notes, "the responder's kernel did not report the TOS of arriving requests")
	}
	return res, nil
}

// putRequest writes a request into b.
func putRequest(b []byte, typ uint8, session probe.SessionID, seq uint64) {
	probe.PacketHeader{Type: typ, Session: session}.Put(b)
	binary.BigEndian.PutUint64(b[offSeq:], seq)
}

// parseResponse reads a response's fields.
func parseResponse(b []byte) (seq uint64, dwellNs int64, tos int, tosOK bool) {
	seq = binary.BigEndian.Uint64(b[offSeq:])
	dwellNs = int64(binary.BigEndian.Uint64(b[offDwell:]))
	t := int32(binary.BigEndian.Uint32(b[offTOS:]))
	return seq, dwellNs, int(t), t >= 0
}

// answer turns a request in b into its response in place.
func answer(b []byte, rxNs int64, tos int, tosOK bool) {
	b[2] = probe.PacketRRResponse
	t := int32(-1)
	if tosOK {
		t = int32(tos)
	}
	binary.BigEndian.PutUint32(b[offTOS:], uint32(t))
	dwell := time.Now().UnixNano() - rxNs
	if rxNs == 0 || dwell < 0 {
		dwell = 0
	}
	binary.BigEndian.PutUint64(b[offDwell:], uint64(dwell))
}

// networkRTT is the kernel-timestamped round trip less the responder's
// dwell; without a kernel timestamp it falls back to the application's.
func networkRTT(t1, kernelRx, appRx, dwell int64) int64 {
	end := kernelRx
	if end == 0 || end > appRx {
		end = appRx
	}
	v := end - t1 - dwell
	if v < 0 {
		v = 0
	}
	return v
}

// --- UDP ---

type udpClient struct {
	conn    *net.UDPConn
	session probe.SessionID
	size    int
	timeout time.Duration
	req     []byte
	buf     []byte
	oob     []byte
}

func dialUDP(ctx context.Context, spec probe.Spec, session probe.SessionID, timeout time.Duration) (*udpClient, error) {
	d := net.Dialer{Control: probe.SockOpts{TOS: spec.TOSByte(), RecvTstamp: true}.Control()}
	if spec.Source != "" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(spec.Source)}
	}
	nc, err := d.DialContext(ctx, "udp", spec.Target)
	if err != nil {
		return nil, fmt.Errorf("rr: open udp socket to %s: %w", spec.Target, err)
	}
	sz := size(spec)
	return &udpClient{conn: nc.(*net.UDPConn), session: session, size: sz, timeout: timeout,
		req: make([]byte, sz), buf: make([]byte, sz+64), oob: make([]byte, 128)}, nil
}

func (u *udpClient) close() { u.conn.Close() }

func (u *udpClient) do(ctx context.Context, seq uint64) (sample, error) {
	putRequest(u.req, probe.PacketRRRequest, u.session, seq)
	stop := context.AfterFunc(ctx, func() { _ = u.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	deadline := time.Now().Add(u.timeout)
	_ = u.conn.SetReadDeadline(deadline)
	t1 := time.Now().UnixNano()
	if _, err := u.conn.Write(u.req); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return sample{}, fmt.Errorf("send request: responder port closed: %w", err)
		}
		return sample{}, fmt.Errorf("send request: %w", err)
	}
	for {
		n, oobn, _, _, err := u.conn.ReadMsgUDP(u.buf, u.oob)
		appRx := time.Now().UnixNano()
		if err != nil {
			if ctx.Err() != nil {
				return sample{}, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return sample{}, errTimeout
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				return sample{}, fmt.Errorf("read response: responder port closed: %w", err)
			}
			return sample{}, fmt.Errorf("read response: %w", err)
		}
		h, ok := probe.ParsePacketHeader(u.buf[:n])
		if !ok || n < MinSize || h.Type != probe.PacketRRResponse || h.Session != u.session {
			continue
		}
		rseq, dwell, tos, tosOK := parseResponse(u.buf[:n])
		if rseq != seq {
			continue // a late answer to an earlier request
		}
		_, _, kts, _ := probe.ParseTOSCmsgs(u.oob[:oobn])
		return sample{rttNs: networkRTT(t1, kts, appRx, dwell), appNs: appRx - t1, tos: tos, tosOK: tosOK}, nil
	}
}

// --- TCP ---

type tcpClient struct {
	conn    net.Conn
	raw     syscall.RawConn
	session probe.SessionID
	size    int
	timeout time.Duration
	req     []byte
	buf     []byte
}

func dialTCP(ctx context.Context, c *probe.Client, spec probe.Spec, timeout time.Duration) (*tcpClient, error) {
	dc, err := c.DialData(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("rr: %w", err)
	}
	t, err := newTCPClient(dc, c.Session, size(spec), timeout)
	if err != nil {
		dc.Close()
		return nil, err
	}
	return t, nil
}

func newTCPClient(dc net.Conn, session probe.SessionID, sz int, timeout time.Duration) (*tcpClient, error) {
	if err := probe.ApplyConn(dc, probe.SockOpts{RecvTstamp: true, NoDelay: true}); err != nil {
		return nil, fmt.Errorf("rr: socket options: %w", err)
	}
	raw, err := dc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	return &tcpClient{conn: dc, raw: raw, session: session, size: sz, timeout: timeout, req: make([]byte, sz), buf: make([]byte, sz)}, nil
}

func (t *tcpClient) close() { t.conn.Close() }

func (t *tcpClient) do(ctx context.Context, seq uint64) (sample, error) {
	return t.doAt(ctx, seq, 0)
}

// doAt runs one transaction; t1, when not 0, is when the transaction began
// (TCP_CRR counts its connect).
func (t *tcpClient) doAt(ctx context.Context, seq uint64, t1 int64) (sample, error) {
	putRequest(t.req, probe.PacketRRRequest, t.session, seq)
	stop := context.AfterFunc(ctx, func() { _ = t.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = t.conn.SetDeadline(time.Now().Add(t.timeout))
	if t1 == 0 {
		t1 = time.Now().UnixNano()
	}
	if _, err := t.conn.Write(t.req); err != nil {
		return sample{}, tcpErr(ctx, "send request", err)
	}
	kts, err := readFullTS(t.conn, t.raw, t.buf)
	appRx := time.Now().UnixNano()
	if err != nil {
		return sample{}, tcpErr(ctx, "read response", err)
	}
	rseq, dwell, tos, tosOK := parseResponse(t.buf)
	if h, ok := probe.ParsePacketHeader(t.buf); !ok || h.Type != probe.PacketRRResponse || rseq != seq {
		return sample{}, fmt.Errorf("read response: out of step (sequence %d, want %d)", rseq, seq)
	}
	return sample{rttNs: networkRTT(t1, kts, appRx, dwell), appNs: appRx - t1, tos: tos, tosOK: tosOK}, nil
}

// tcpErr names a TCP failure; over TCP a timeout is fatal (the stream is out
// of step), not a lost transaction.
func tcpErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: connection closed by the responder", what)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: no response in time: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// readFullTS fills b from a TCP connection with recvmsg, returning the
// kernel receive timestamp of the data that completed it (0 if none). It
// honours the connection's read deadline.
func readFullTS(c net.Conn, raw syscall.RawConn, b []byte) (int64, error) {
	var oob [128]byte
	got := 0
	var ts int64
	for got < len(b) {
		var n, oobn int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b[got:], oob[:], unix.MSG_DONTWAIT)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			if got == 0 {
				return 0, io.EOF
			}
			return 0, io.ErrUnexpectedEOF
		}
		got += n
		if _, _, k, ok := probe.ParseTOSCmsgs(oob[:oobn]); ok {
			ts = k
		}
	}
	return ts, nil
}

// --- TCP_CRR ---

type crrClient struct {
	c       *probe.Client
	spec    probe.Spec
	timeout time.Duration
}

func (*crrClient) close() {}

func (r *crrClient) do(ctx context.Context, seq uint64) (sample, error) {
	dctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	t1 := time.Now().UnixNano()
	dc, err := r.c.DialData(dctx, int(seq%(1<<31)))
	if err != nil {
		if ctx.Err() != nil {
			return sample{}, ctx.Err()
		}
		return sample{}, fmt.Errorf("connect: %w", err)
	}
	defer dc.Close()
	t, err := newTCPClient(dc, r.c.Session, size(r.spec), r.timeout)
	if err != nil {
		return sample{}, err
	}
	return t.doAt(ctx, seq, t1)
}

// --- responder side ---

// Handler is the responder side.
type Handler struct{}

// Kind returns "rr".
func (Handler) Kind() string { return probe.KindRR }

// Serve runs one session: it answers requests until the client stops or
// goes away.
func (Handler) Serve(ctx context.Context, s *probe.Session) error {
	spec := s.Spec
	if err := (Prober{}).Validate(spec); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sz := size(spec)
	switch proto(spec) {
	case ProtoUDP:
		resp := make([]byte, sz)
		s.HandlePackets(func(pkt []byte, from netip.AddrPort, rx probe.RxInfo) {
			if len(pkt) < MinSize || pkt[2] != probe.PacketRRRequest || len(pkt) > len(resp) {
				return
			}
			n := copy(resp, pkt)
			kts := rx.KernelNs
			if kts == 0 {
				kts = rx.RecvNs
			}
			answer(resp[:n], kts, rx.TOS, rx.TOSOK)
			_ = s.WriteTo(resp[:n], from)
		})
	case ProtoTCP, ProtoCRR:
		go serveTCP(ctx, s, sz, proto(spec) == ProtoCRR)
	}
	if err := s.Ctrl.Send(ctx, probe.Message{Type: probe.MsgReady}); err != nil {
		return err
	}
	// The session lasts until the client says stop or closes the control
	// connection; either ends it cleanly.
	_, err := s.Ctrl.RecvNoDeadline(ctx)
	if err != nil && ctx.Err() == nil {
		s.Log.Debug("rr session ended", "err", err)
	}
	return nil
}

// serveTCP answers requests on the session's data connections: one
// long-lived connection (TCP_RR) or one per transaction (TCP_CRR).
func serveTCP(ctx context.Context, s *probe.Session, sz int, perTransaction bool) {
	for {
		dc, err := s.AcceptData(ctx)
		if err != nil {
			return
		}
		if perTransaction {
			go func() {
				defer dc.Close()
				serveConn(ctx, dc.Conn, sz, 1)
			}()
			continue
		}
		go func() {
			defer dc.Close()
			serveConn(ctx, dc.Conn, sz, -1)
		}()
	}
}

// serveConn answers up to n requests (n < 0: until EOF) on c.
func serveConn(ctx context.Context, c net.Conn, sz, n int) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := probe.ApplyConn(c, probe.SockOpts{RecvTstamp: true, NoDelay: true}); err != nil {
		return
	}
	tos, tosOK := probe.ConnTOS(c)
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, sz)
	for i := 0; n < 0 || i < n; i++ {
		_ = c.SetReadDeadline(time.Now().Add(MaxDuration))
		kts, err := readFullTS(c, raw, buf)
		if err != nil {
			return
		}
		if kts == 0 {
			kts = time.Now().UnixNano()
		}
		answer(buf, kts, tos, tosOK)
		_ = c.SetWriteDeadline(time.Now().Add(ctrlTimeout))
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}
