package stamp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Reflector limits.
const (
	// maxSessions bounds a stateful reflector's session table; sessions
	// idle for sessionIdle are forgotten.
	maxSessions = 1 << 16
	sessionIdle = 5 * time.Minute
	// ioTimeout bounds every reply's write.
	ioTimeout = time.Second
	// sweepEvery is how often the session table is swept; a read waits at
	// most until the next sweep (cancellation closes the socket), so an
	// idle reflector wakes once a sweep, not once a second.
	sweepEvery = time.Minute
	maxPacket  = 9000
)

// ReflectorOptions configure a Session-Reflector.
type ReflectorOptions struct {
	// Key selects authenticated mode (RFC 8762 §4.2.2): only test packets
	// whose HMAC verifies with it are answered. Nil means unauthenticated
	// (open) mode.
	Key []byte
	// Stateless copies the sender's sequence numbers into the replies; the
	// default (stateful) counts each session's reflected packets, so the
	// sender can tell forward from reverse loss.
	Stateless bool
	Logger    *slog.Logger
}

// Reflector is a STAMP Session-Reflector (RFC 8762 §4.3) with the TLVs of
// RFC 8972 that cnperf needs: Extra Padding, Timestamp Information, Class
// of Service and HMAC. It answers every test packet to the address and
// port the packet came from, so it works behind source NAT.
type Reflector struct {
	opts ReflectorOptions
	log  *slog.Logger
	conn *net.UDPConn
	v6   bool

	mu       sync.Mutex // guards sessions
	sessions map[sessionKey]*session

	reflected, dropped atomic.Int64
}

type sessionKey struct {
	from netip.AddrPort
	ssid uint16
}

type session struct {
	next     uint32
	lastSeen time.Time
}

// NewReflector checks opts and returns a reflector.
func NewReflector(opts ReflectorOptions) (*Reflector, error) {
	if opts.Key != nil && len(opts.Key) < MinKeyLen {
		return nil, fmt.Errorf("stamp reflector: key of %d bytes, want at least %d", len(opts.Key), MinKeyLen)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reflector{opts: opts, log: opts.Logger, sessions: map[sessionKey]*session{}}, nil
}

// Listen binds the reflector's UDP socket (HOST:PORT; ":862" is the
// standard port on every address).
func (r *Reflector) Listen(ctx context.Context, addr string) error {
	var optErr error
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		v6 := network == "udp6" || network == "udp" && !isV4Host(address)
		err := c.Control(func(fd uintptr) { optErr = recvOpts(int(fd), v6) })
		return errors.Join(err, optErr)
	}}
	pc, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		return fmt.Errorf("stamp reflector: listen udp %s: %w", addr, err)
	}
	r.conn = pc.(*net.UDPConn)
	r.v6 = !r.conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Is4()
	_ = r.conn.SetReadBuffer(4 << 20)
	return nil
}

func isV4Host(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Is4()
}

// Addr returns the bound address.
func (r *Reflector) Addr() *net.UDPAddr { return r.conn.LocalAddr().(*net.UDPAddr) }

// Counts returns the packets reflected and those dropped (too short for
// authenticated mode, failed HMAC, send errors).
func (r *Reflector) Counts() (reflected, dropped int64) {
	return r.reflected.Load(), r.dropped.Load()
}

// Close stops Serve.
func (r *Reflector) Close() error {
	if r.conn == nil {
		return nil
	}
	return r.conn.Close()
}

// Serve answers test packets until ctx ends or Close is called.
func (r *Reflector) Serve(ctx context.Context) error {
	if r.conn == nil {
		return errors.New("stamp reflector: Serve before Listen")
	}
	stop := context.AfterFunc(ctx, func() { _ = r.conn.Close() })
	defer stop()
	in := make([]byte, maxPacket)
	out := make([]byte, maxPacket)
	oob := make([]byte, 256)
	lastSweep := time.Now()
	for {
		if err := r.conn.SetReadDeadline(lastSweep.Add(sweepEvery)); err != nil {
			return r.ended(ctx, err)
		}
		n, oobn, _, from, err := r.conn.ReadMsgUDPAddrPort(in, oob)
		if time.Since(lastSweep) >= sweepEvery {
			r.sweep(time.Now())
			lastSweep = time.Now()
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return r.ended(ctx, nil)
			}
			r.log.Debug("stamp read", "err", err)
			continue
		}
		meta := parseCmsgs(oob[:oobn])
		if meta.kernelNs == 0 {
			meta.kernelNs = time.Now().UnixNano()
		}
		m, tos, ok := r.answer(out, in[:n], from, meta)
		if !ok {
			r.dropped.Add(1)
			continue
		}
		_ = r.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
		v6 := !from.Addr().Is4() && !from.Addr().Is4In6()
		if _, _, err := r.conn.WriteMsgUDPAddrPort(out[:m], udpio.TOSCmsg(tos, v6), from); err != nil {
			r.dropped.Add(1)
			r.log.Debug("stamp reply", "to", from, "err", err)
			continue
		}
		r.reflected.Add(1)
	}
}

func (r *Reflector) ended(ctx context.Context, err error) error {
	if ctx.Err() != nil || err == nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("stamp reflector: %w", err)
}

// nextSeq returns the reflected packet's sequence number: the sender's
// (stateless) or the session's own count (stateful).
func (r *Reflector) nextSeq(from netip.AddrPort, sp SenderPacket) uint32 {
	if r.opts.Stateless {
		return sp.Seq
	}
	k := sessionKey{from: from, ssid: sp.SSID}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[k]
	if s == nil {
		if len(r.sessions) >= maxSessions {
			r.sweepLocked(now)
		}
		if len(r.sessions) >= maxSessions {
			return sp.Seq // table full: answer statelessly rather than not at all
		}
		s = &session{}
		r.sessions[k] = s
	}
	seq := s.next
	s.next++
	s.lastSeen = now
	return seq
}

func (r *Reflector) sweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
}

func (r *Reflector) sweepLocked(now time.Time) {
	for k, s := range r.sessions {
		if now.Sub(s.lastSeen) > sessionIdle {
			delete(r.sessions, k)
		}
	}
}

// answer builds the reflected packet for the test packet pkt in out and
// returns its length and the TOS byte to send it with; ok is false when
// the packet must be dropped.
func (r *Reflector) answer(out, pkt []byte, from netip.AddrPort, meta rxMeta) (n int, tos int, ok bool) {
	auth := r.opts.Key != nil
	base := BaseLenOf(auth)
	// Not a traffic generator (docs/control-plane.md): a packet shorter
	// than the base gets no answer, as a base-size answer would be larger
	// than what came in; and a packet that is itself a reflector's answer
	// (its receive timestamp set where a sender's packet has zeros) gets
	// none either, or two reflectors would answer each other forever after
	// one packet spoofed from the other.
	if len(pkt) < base || IsReflected(pkt, auth) {
		return 0, 0, false
	}
	if auth {
		if VerifyBase(pkt, r.opts.Key) != nil {
			return 0, 0, false
		}
	}
	// Symmetric size (RFC 8762 §4.2).
	n = len(pkt)
	clear(out[:n])
	copy(out, pkt)
	sp, _ := ParseSender(out, auth)
	errEst, syncSrc := LocalClock()
	rp := ReflectorPacket{
		Seq: r.nextSeq(from, sp), ErrEst: errEst, SSID: sp.SSID,
		RxTime: NTPTime(meta.kernelNs), SenderSeq: sp.Seq, SenderTime: sp.Timestamp, SenderErr: sp.ErrEst,
	}
	if meta.ttlOK {
		rp.SenderTTL = uint8(meta.ttl)
	}
	tos, cosSeen := r.processTLVs(out[:n], pkt, base, meta, syncSrc)
	if !cosSeen {
		tos = 0
	}
	// T3 as late as possible: after the TLVs, right before signing and
	// sending.
	rp.Timestamp = NTPTime(time.Now().UnixNano())
	rp.Put(out, auth)
	if auth {
		r.signTLVs(out[:n], base)
		SignBase(out, r.opts.Key)
	}
	return n, tos, true
}

// processTLVs answers the TLVs of the received packet in place in out (a
// copy of it): flags per RFC 8972 §4 (U for types it does not know, M for
// a malformed TLV and then nothing more, I on all when the HMAC TLV fails),
// Timestamp Information filled in, Class of Service answered. It returns
// the TOS byte the reply should carry and whether a CoS TLV asked for one.
func (r *Reflector) processTLVs(out, pkt []byte, base int, meta rxMeta, syncSrc uint8) (tos int, cos bool) {
	tlvs, malformed := ParseTLVs(out, base)
	for _, t := range tlvs {
		out[t.Off] = 0 // reflector sets U, M, I afresh; R bits are zero
	}
	if len(tlvs) == 0 && malformed < 0 {
		return 0, false
	}
	if r.opts.Key != nil && !verifyTLVs(r.opts.Key, pkt, base, tlvs) {
		for _, t := range tlvs {
			out[t.Off] = FlagI
		}
		return 0, false
	}
	if r.opts.Key == nil {
		for _, t := range tlvs {
			if t.Type == TypeHMAC { // cannot be verified without a key
				for _, u := range tlvs {
					out[u.Off] = FlagI
				}
				return 0, false
			}
		}
	}
	for _, t := range tlvs {
		if !recognised(t.Type) {
			out[t.Off] = FlagU
			continue
		}
		if want := valueLen(t.Type); want >= 0 && len(t.Value) != want {
			out[t.Off] = FlagM
			return tos, cos // stop processing; the rest is copied as received
		}
		switch t.Type {
		case TypeTimestampInfo:
			// T2 is the kernel's software receive stamp, T3 the clock
			// read before the send: both software, local.
			t.Value[0], t.Value[1], t.Value[2], t.Value[3] = syncSrc, StampSWLocal, syncSrc, StampSWLocal
		case TypeClassOfService:
			c := ParseCoS(t.Value)
			c.DSCP2, c.ECN, c.RP = uint8(meta.tos>>2), uint8(meta.tos&0x03), 0
			if !meta.tosOK {
				c.DSCP2, c.ECN = 0, 0
			}
			c.Put(t.Value)
			tos, cos = int(c.DSCP1)<<2, true
		}
	}
	if malformed >= 0 {
		out[malformed] |= FlagM
	}
	return tos, cos
}

// signTLVs rewrites the HMAC TLV of a reflected packet over its own
// sequence number and the TLVs before it (RFC 8972 §4.8), unless the
// received one failed (I flag set).
func (r *Reflector) signTLVs(out []byte, base int) {
	tlvs, _ := ParseTLVs(out, base)
	for _, t := range tlvs {
		if t.Type == TypeHMAC && len(t.Value) == HMACLen && out[t.Off]&(FlagI|FlagM) == 0 {
			m := tlvMAC(r.opts.Key, out, base, t.Off)
			copy(t.Value, m[:])
		}
	}
}

// Unclaimed returns the handler that reflects the STAMP test packets a cnperf
// responder receives on its shared UDP port (engine.Responder.HandleUnclaimed).
// The responder's kernel does not report the TTL there, so Ses-Sender TTL
// is 0 in those replies; the reflector's own port (Listen) reports it.
func (r *Reflector) Unclaimed() engine.UnclaimedFunc {
	out := make([]byte, maxPacket) // the responder's reader calls one at a time
	return func(pkt []byte, from netip.AddrPort, rx engine.RxInfo, reply func([]byte, int) error) {
		if len(pkt) > maxPacket {
			r.dropped.Add(1)
			return
		}
		meta := rxMeta{tos: rx.TOS, tosOK: rx.TOSOK, kernelNs: rx.KernelNs}
		if meta.kernelNs == 0 {
			meta.kernelNs = time.Now().UnixNano()
		}
		n, tos, ok := r.answer(out, pkt, from, meta)
		if !ok {
			r.dropped.Add(1)
			return
		}
		if err := reply(out[:n], tos); err != nil {
			r.dropped.Add(1)
			r.log.Debug("stamp reply", "to", from, "err", err)
			return
		}
		r.reflected.Add(1)
	}
}

// Sources returns the source addresses of the sessions a stateful
// reflector keeps (what it saw: behind SNAT, the translated address).
func (r *Reflector) Sources() []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]netip.AddrPort, 0, len(r.sessions))
	for k := range r.sessions {
		out = append(out, k.from)
	}
	return out
}
