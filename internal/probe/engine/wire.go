package engine

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Prefaces that open a connection to a responder.
var (
	PrefaceControl = [4]byte{'C', 'N', 'P', 'C'}
	PrefaceData    = [4]byte{'C', 'N', 'P', 'D'}
)

// PacketMagic opens every cnperf datagram.
var PacketMagic = [2]byte{0xC7, 0x9E}

// PacketHeaderLen is the size of PacketHeader on the wire.
const PacketHeaderLen = 12

// Packet types in PacketHeader.Type.
const (
	PacketUDPData    = 1 // udp probe datagram
	PacketRRRequest  = 2 // rr request
	PacketRRResponse = 3 // rr response
)

// PacketHeader opens every cnperf datagram: 2 bytes magic, 1 byte type,
// 1 byte flags, 8 bytes session id.
type PacketHeader struct {
	Type    uint8
	Flags   uint8
	Session SessionID
}

// Put writes h into b[:PacketHeaderLen].
func (h PacketHeader) Put(b []byte) {
	b[0], b[1] = PacketMagic[0], PacketMagic[1]
	b[2], b[3] = h.Type, h.Flags
	copy(b[4:12], h.Session[:])
}

// ParsePacketHeader reads the header at the start of b.
func ParsePacketHeader(b []byte) (PacketHeader, bool) {
	if len(b) < PacketHeaderLen || b[0] != PacketMagic[0] || b[1] != PacketMagic[1] {
		return PacketHeader{}, false
	}
	var h PacketHeader
	h.Type, h.Flags = b[2], b[3]
	copy(h.Session[:], b[4:12])
	return h, true
}

// SessionID isolates one test on a responder.
type SessionID [8]byte

// NewSessionID returns a random session id.
func NewSessionID() SessionID {
	var id SessionID
	_, _ = rand.Read(id[:])
	return id
}

// String returns the id in hex.
func (id SessionID) String() string { return hex.EncodeToString(id[:]) }

// ParseSessionID reads a hex session id.
func ParseSessionID(s string) (SessionID, error) {
	var id SessionID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("session id %q: want 16 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

// Control message types.
const (
	MsgHello  = "hello"  // client → responder: kind, session, spec
	MsgOK     = "ok"     // responder → client: session accepted
	MsgError  = "error"  // either way: the other side gave up, Error says why
	MsgTime   = "time"   // clock exchange (T1 from the client, T2 and BootID back)
	MsgReady  = "ready"  // responder → client: the handler listens; datagrams may flow
	MsgStart  = "start"  // client → responder: begin sending / counting
	MsgStop   = "stop"   // client → responder: the test is over
	MsgResult = "result" // responder → client: its side's figures in Data
)

// Message is one line on a control connection.
type Message struct {
	Type    string      `json:"type"`
	Kind    string      `json:"kind,omitempty"`
	Session string      `json:"session,omitempty"`
	Spec    *probe.Spec `json:"spec,omitempty"`
	Error   string      `json:"error,omitempty"`
	T1      int64       `json:"t1,omitempty"`
	T2      int64       `json:"t2,omitempty"`
	BootID  string      `json:"boot_id,omitempty"`
	// Sync, in a hello, announces how many time exchanges follow the
	// responder's "ok" before the kind's own protocol starts.
	Sync int             `json:"sync,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
	// Key, in a hello, is the session's test key (see KeyChecker).
	Key string `json:"key,omitempty"`
}

// RemoteError is an error the other end reported on the control connection.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return "responder: " + e.Msg }

// maxMessage bounds one control message of an admitted session.
const maxMessage = 4 << 20

// DefaultControlTimeout bounds a control-connection read or write when the
// context carries no deadline.
const DefaultControlTimeout = 10 * time.Second

// ControlConn carries newline-delimited JSON messages. Send may be called
// from several goroutines; Recv from one at a time.
type ControlConn struct {
	conn net.Conn
	rd   *bufio.Reader
	wmu  sync.Mutex // guards writes to conn
	// answerTime makes Recv answer MsgTime requests itself (responder side).
	answerTime bool
	// limit bounds one message; 0 means maxMessage. The responder holds a
	// hello to maxHello until it admits the session.
	limit int
}

// NewControlConn wraps an established connection whose preface has been
// exchanged.
func NewControlConn(c net.Conn) *ControlConn {
	return &ControlConn{conn: c, rd: bufio.NewReaderSize(c, 64<<10)}
}

// newResponderControlConn is the responder's side: a small read buffer
// (the messages it reads are small), and a hello held to maxHello.
func newResponderControlConn(c net.Conn) *ControlConn {
	return &ControlConn{conn: c, rd: bufio.NewReaderSize(c, helloReadBuffer), limit: maxHello}
}

// Conn returns the underlying connection.
func (c *ControlConn) Conn() net.Conn { return c.conn }

// Close closes the connection.
func (c *ControlConn) Close() error { return c.conn.Close() }

// deadline returns the deadline for one operation under ctx.
func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(DefaultControlTimeout)
}

// Send writes one message, bounded by ctx's deadline (or the default).
func (c *ControlConn) Send(ctx context.Context, m Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = c.conn.SetWriteDeadline(deadline(ctx))
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("send %s message: %w", m.Type, ctxErr(ctx, err))
	}
	return nil
}

// Recv reads the next message, bounded by ctx's deadline (or the default).
// A MsgError from the far end comes back as a *RemoteError.
func (c *ControlConn) Recv(ctx context.Context) (Message, error) {
	for {
		m, err := c.recvOne(ctx)
		if err != nil {
			return m, err
		}
		if c.answerTime && m.Type == MsgTime {
			reply := Message{Type: MsgTime, T1: m.T1, T2: time.Now().UnixNano(), BootID: BootID()}
			if err := c.Send(ctx, reply); err != nil {
				return Message{}, err
			}
			continue
		}
		if m.Type == MsgError {
			return m, &RemoteError{Msg: m.Error}
		}
		return m, nil
	}
}

// RecvNoDeadline is Recv bounded only by ctx's cancellation, for a side
// that waits for the other to finish a test of unknown length.
func (c *ControlConn) RecvNoDeadline(ctx context.Context) (Message, error) {
	ctx2, cancel := context.WithDeadline(ctx, time.Now().Add(24*time.Hour))
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		ctx2, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	return c.Recv(ctx2)
}

func (c *ControlConn) recvOne(ctx context.Context) (Message, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = c.conn.SetReadDeadline(deadline(ctx))
	limit := c.limit
	if limit <= 0 {
		limit = maxMessage
	}
	line, err := readLine(c.rd, limit)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Message{}, fmt.Errorf("control connection closed by peer: %w", io.ErrUnexpectedEOF)
		}
		if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
			// The read's deadline is ctx's: the socket can time out a
			// moment before the context says so. Report the context's
			// expiry, as every caller that checks ctx.Err() expects.
			<-ctx.Done()
		}
		return Message{}, fmt.Errorf("receive control message: %w", ctxErr(ctx, err))
	}
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, fmt.Errorf("decode control message: %w", err)
	}
	return m, nil
}

// ErrNotCnperf marks a peer that does not speak cnperf's control protocol.
var ErrNotCnperf = errors.New("not a cnperf responder")

// answersJSON waits for the first byte of the peer's answer to a hello and
// fails at once when it cannot begin a JSON message, instead of waiting
// out the deadline for a newline that never comes. A stock iperf3 server
// reads the first 37 bytes of the hello as its cookie and answers with one
// state byte (PARAM_EXCHANGE, 9; ACCESS_DENIED -1; SERVER_ERROR -2).
func (c *ControlConn) answersJSON(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = c.conn.SetReadDeadline(deadline(ctx))
	b, err := c.rd.Peek(1)
	if err != nil || b[0] == '{' {
		return nil // Recv reports a read error with its context
	}
	switch int8(b[0]) {
	case 9, -1, -2:
		return fmt.Errorf("%w: it answered the hello with byte %d, an iperf3 state, as a stock iperf3 server does: measure it with --peer iperf3", ErrNotCnperf, int8(b[0]))
	}
	return fmt.Errorf("%w: it answered the hello with byte 0x%02x, not a JSON message", ErrNotCnperf, b[0])
}

// Expect reads the next message and checks its type.
func (c *ControlConn) Expect(ctx context.Context, typ string) (Message, error) {
	m, err := c.Recv(ctx)
	if err != nil {
		return m, err
	}
	if m.Type != typ {
		return m, fmt.Errorf("control protocol: want %q message, got %q", typ, m.Type)
	}
	return m, nil
}

// SendError tells the far end why this side gives up.
func (c *ControlConn) SendError(ctx context.Context, err error) {
	_ = c.Send(ctx, Message{Type: MsgError, Error: err.Error()})
}

// readLine reads one line of at most limit bytes (newline included); it
// holds no more than limit bytes plus one fragment of r's buffer.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(buf)+len(frag) > limit {
			return nil, fmt.Errorf("control message longer than %d bytes", limit)
		}
		buf = append(buf, frag...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// ctxErr prefers the context's error to the timeout it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// Client is the client side of a session: the control connection and the
// means to open data connections.
type Client struct {
	Ctrl    *ControlConn
	Session SessionID
	Target  string
	Dialer  net.Dialer
	// Clock is the responder's clock against this host's, measured by
	// Dial (one-way figures need it).
	Clock probe.ClockInfo
}

// clockSyncExchanges is how many time exchanges Dial makes.
const clockSyncExchanges = 5

// Dial opens a control connection to the responder at spec.Target, sends the
// hello, waits for the answer and measures the responder's clock (Client.Clock). The dialer's Control applies opts (DSCP on
// the SYN). Close the client when done.
func Dial(ctx context.Context, spec probe.Spec, opts SockOpts) (*Client, error) {
	return DialWithKey(ctx, spec, opts, "")
}

// ErrUnreachable is how a session that never reached a cnperf responder
// fails (as an *UnreachableError): a refused connection, a timeout, a
// reset and a peer that does not answer the control protocol. A
// responder's own refusal (a RemoteError: no test key, an unknown kind)
// is not one.
var ErrUnreachable = errors.New("responder unreachable")

// UnreachableError is a session that never reached a cnperf responder.
// Its Error tells the cause, for a person running a probe; Opaque is what
// a task's error carries: a task's error is read by whoever can list
// tasks, and the cause would turn agents into a scanner of which ports of
// a target are open.
type UnreachableError struct {
	Target string
	Cause  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("connect to responder %s: %v", e.Target, e.Cause)
}

func (e *UnreachableError) Unwrap() error { return e.Cause }

func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// Opaque is the error without its cause: refused, timed out and another
// protocol read the same.
func (e *UnreachableError) Opaque() error {
	return fmt.Errorf("connect to responder %s: %w", e.Target, ErrUnreachable)
}

// DialWithKey is Dial with a test key in the hello (Env.TestKey), for a
// responder that serves only scheduled tests.
func DialWithKey(ctx context.Context, spec probe.Spec, opts SockOpts, key string) (*Client, error) {
	timeout := spec.TimeoutOr(DefaultControlTimeout)
	d := net.Dialer{Timeout: timeout, Control: opts.Control()}
	if spec.Source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(spec.Source)}
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Until a cnperf responder answers, every failure is an
	// UnreachableError, or the caller's own end.
	unreachable := func(err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("connect to responder %s: %w", spec.Target, cerr)
		}
		return &UnreachableError{Target: spec.Target, Cause: err}
	}
	conn, err := d.DialContext(dctx, "tcp", spec.Target)
	if err != nil {
		return nil, unreachable(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = conn.SetWriteDeadline(deadline(dctx))
	if _, err := conn.Write(PrefaceControl[:]); err != nil {
		conn.Close()
		return nil, unreachable(err)
	}
	c := &Client{Ctrl: NewControlConn(conn), Session: NewSessionID(), Target: spec.Target, Dialer: d}
	sp := spec
	if err := c.Ctrl.Send(dctx, Message{Type: MsgHello, Kind: spec.Kind, Session: c.Session.String(), Spec: &sp, Sync: clockSyncExchanges, Key: key}); err != nil {
		conn.Close()
		return nil, unreachable(err)
	}
	if err := c.Ctrl.answersJSON(dctx); err != nil {
		conn.Close()
		return nil, unreachable(err)
	}
	if _, err := c.Ctrl.Expect(dctx, MsgOK); err != nil {
		conn.Close()
		var re *RemoteError
		if !errors.As(err, &re) {
			return nil, unreachable(err)
		}
		return nil, fmt.Errorf("responder %s refused the %s session: %w", spec.Target, spec.Kind, err)
	}
	clock, err := SyncClock(dctx, c.Ctrl, clockSyncExchanges)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("responder %s: %w", spec.Target, err)
	}
	c.Clock = clock
	return c, nil
}

// DialData opens data connection number stream for the session.
func (c *Client) DialData(ctx context.Context, stream int) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.Dialer.Timeout)
	defer cancel()
	conn, err := c.Dialer.DialContext(dctx, "tcp", c.Target)
	if err != nil {
		return nil, fmt.Errorf("open data connection %d to %s: %w", stream, c.Target, err)
	}
	var pre [16]byte
	copy(pre[0:4], PrefaceData[:])
	copy(pre[4:12], c.Session[:])
	binary.BigEndian.PutUint32(pre[12:16], uint32(stream))
	_ = conn.SetWriteDeadline(deadline(dctx))
	if _, err := conn.Write(pre[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("open data connection %d to %s: %w", stream, c.Target, err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// LocalAddr returns the control connection's local address.
func (c *Client) LocalAddr() net.Addr { return c.Ctrl.conn.LocalAddr() }

// Close ends the session.
func (c *Client) Close() error { return c.Ctrl.Close() }
