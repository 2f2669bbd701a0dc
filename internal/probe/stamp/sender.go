package stamp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Sender defaults and limits.
const (
	DefaultCount    = 100
	DefaultInterval = 10 * time.Millisecond
	DefaultTimeout  = time.Second
	MaxSize         = 8900
	maxCount        = 10_000_000
	// rxStampWait bounds the wait for kernel receive time-stamping to be
	// in effect (engine.HoldRxTimestamps).
	rxStampWait = 200 * time.Millisecond
)

// The TLVs every cnperf test packet carries: Class of Service (to learn
// the DSCP that arrived and to ask for the reply's) and Timestamp
// Information (to learn how the reflector stamps), 8 bytes each; in
// authenticated mode an HMAC TLV (20 bytes) follows them.
const (
	cosTLVLen  = tlvHdrLen + 4
	tsiTLVLen  = tlvHdrLen + 4
	hmacTLVLen = tlvHdrLen + HMACLen
)

// MinSize is the smallest test packet cnperf sends in a mode: the base
// packet and its TLVs. A larger --size adds an Extra Padding TLV, at least
// its 4-byte header.
func MinSize(auth bool) int {
	n := BaseLenOf(auth) + cosTLVLen + tsiTLVLen
	if auth {
		n += hmacTLVLen
	}
	return n
}

// config is a validated spec.
type config struct {
	target   string // HOST:PORT
	count    int    // 0: run for duration
	duration time.Duration
	interval time.Duration
	timeout  time.Duration
	size     int
	tos      int
}

// Target returns spec.Target with the default port 862 added when it has
// none.
func Target(t string) string {
	if t == "" {
		return t
	}
	if _, _, err := net.SplitHostPort(t); err == nil {
		return t
	}
	if a, err := netip.ParseAddr(t); err == nil && a.Is6() {
		return net.JoinHostPort(t, strconv.Itoa(DefaultPort))
	}
	if _, err := strconv.Atoi(t); err == nil {
		return t // a bare number is not a host; let validation say so
	}
	return net.JoinHostPort(t, strconv.Itoa(DefaultPort))
}

func validate(spec probe.Spec, auth bool) (config, error) {
	spec.Target = Target(spec.Target)
	var errs []error
	if err := spec.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	c := config{target: spec.Target, count: spec.Count, interval: spec.IntervalOr(DefaultInterval),
		timeout: spec.TimeoutOr(DefaultTimeout), size: spec.Size, tos: spec.TOSByte()}
	minSize := MinSize(auth)
	switch {
	case c.size == 0:
		c.size = minSize
	case c.size > MaxSize:
		errs = append(errs, fmt.Errorf("size %d: at most %d bytes per test packet", c.size, MaxSize))
	case c.size != minSize && c.size < minSize+tlvHdrLen:
		errs = append(errs, fmt.Errorf("size %d: a %s test packet with its TLVs is %d bytes; give that or at least %d (room for an Extra Padding TLV)",
			c.size, modeName(auth), minSize, minSize+tlvHdrLen))
	}
	if spec.RateBps != nil {
		errs = append(errs, errors.New("rate: stamp sends one test packet per --interval; it takes no rate"))
	}
	if spec.Reverse {
		errs = append(errs, errors.New("reverse: a STAMP test measures both directions already; --reverse does not apply"))
	}
	if spec.Streams > 1 {
		errs = append(errs, fmt.Errorf("streams %d: stamp runs one session", spec.Streams))
	}
	if spec.Count > maxCount {
		errs = append(errs, fmt.Errorf("count %d: at most %d", spec.Count, maxCount))
	}
	if spec.Interval > 0 && spec.Interval.D() < 100*time.Microsecond {
		errs = append(errs, fmt.Errorf("interval %v: at least 100µs", spec.Interval.D()))
	}
	if spec.Interval.D() > time.Hour {
		errs = append(errs, fmt.Errorf("interval %v: at most 1h", spec.Interval.D()))
	}
	if spec.Duration.D() > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %v: at most 24h", spec.Duration.D()))
	}
	if spec.Timeout.D() > time.Minute {
		errs = append(errs, fmt.Errorf("timeout %v: at most 1m per reply", spec.Timeout.D()))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	switch {
	case spec.Duration > 0:
		c.duration = spec.Duration.D()
	case c.count == 0:
		c.count = DefaultCount
	}
	return c, nil
}

func modeName(auth bool) string {
	if auth {
		return "authenticated"
	}
	return "unauthenticated"
}

// Prober is the STAMP Session-Sender (RFC 8762 §4.2). The reflector may be
// cnperf's (any agent's responder port, or `cnperf respond --stamp` on
// 862) or any other STAMP or TWAMP-Light reflector. Authenticated mode
// takes its key from probe.Env.AuthKey.
type Prober struct{}

// Name returns "stamp".
func (Prober) Name() string { return probe.KindStamp }

// Validate rejects specs the sender cannot run. Sizes are checked against
// the unauthenticated minimum; Run checks them again with its key.
func (Prober) Validate(spec probe.Spec) error {
	_, err := validate(spec, false)
	return err
}

// sent is one test packet's record.
type sent struct {
	t1    int64 // clock before the write, ns
	got   bool
	reply reply
}

// reply is what one reflected packet told.
type reply struct {
	t2, t3, t4 int64 // ns since the epoch; t2, t3 on the reflector's clock
	reflSeq    uint32
	reflErr    ErrorEstimate
	kernelRx   bool
	tos        int
	tosOK      bool
	cos        *CoS
	cosFlags   uint8
	tsi        *TimestampInfo
	tlvIssue   string // I or M flags, failed HMAC TLV
}

// session is one run's shared state between the sending loop and the
// reader.
type run struct {
	mu        sync.Mutex
	pkts      []sent
	dups      int64
	badHMAC   int64
	foreign   int64
	lastReply time.Time
	// onReply, when set, gets each first reply as it arrives (Env.OnReply).
	onReply func(probe.Reply)
}

// Run sends the test packets and returns the figures.
func (Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	key := env.AuthKey
	auth := key != nil
	if auth && len(key) < MinKeyLen {
		return nil, fmt.Errorf("invalid stamp probe: key of %d bytes, want at least %d", len(key), MinKeyLen)
	}
	cfg, err := validate(spec, auth)
	if err != nil {
		return nil, fmt.Errorf("invalid stamp probe: %w", err)
	}
	started := env.Clock()()
	defer engine.HoldRxTimestamps(rxStampWait)()
	conn, err := dial(ctx, spec, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	var ssidBuf [2]byte
	_, _ = rand.Read(ssidBuf[:])
	ssid := binary.BigEndian.Uint16(ssidBuf[:]) | 1 // non-zero (RFC 8972 §3)
	st := &run{onReply: env.OnReply}
	readerDone := make(chan error, 1)
	rctx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	go func() { readerDone <- st.read(rctx, conn, auth, key, ssid) }()

	myErr, _ := LocalClock()
	pkt := make([]byte, cfg.size)
	begin := time.Now()
	var sendErr error
	for i := 0; ; i++ {
		if cfg.count > 0 && i >= cfg.count {
			break
		}
		due := begin.Add(time.Duration(i) * cfg.interval)
		if cfg.duration > 0 && due.Sub(begin) >= cfg.duration {
			break
		}
		if err := sleepUntil(ctx, due); err != nil {
			break
		}
		t1 := time.Now().UnixNano()
		buildTest(pkt, uint32(i), t1, myErr, ssid, cfg.tos>>2, key)
		st.mu.Lock()
		st.pkts = append(st.pkts, sent{t1: t1})
		st.mu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(cfg.timeout))
		if _, err := conn.Write(pkt); err != nil {
			if isRefused(err) {
				sendErr = fmt.Errorf("stamp to %s: the reflector's port refused test packet %d (ICMP port unreachable): no reflector there or UDP blocked", cfg.target, i)
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // counted as lost
			}
			sendErr = fmt.Errorf("stamp to %s: send test packet %d: %w", cfg.target, i, err)
			break
		}
	}
	// Wait for the last replies: until every packet is answered or the
	// timeout has passed since the last send.
	waitEnd := time.Now().Add(cfg.timeout)
	for time.Now().Before(waitEnd) && ctx.Err() == nil && sendErr == nil && !st.allAnswered() {
		time.Sleep(5 * time.Millisecond)
	}
	stopReader()
	rerr := <-readerDone
	elapsed := time.Since(begin)
	if sendErr != nil {
		return nil, sendErr
	}
	if rerr != nil {
		return nil, fmt.Errorf("stamp to %s: %w", cfg.target, rerr)
	}
	if ctx.Err() != nil && st.answered() == 0 {
		return nil, fmt.Errorf("stamp to %s: %w before any reply arrived", cfg.target, ctx.Err())
	}
	res := st.result(spec, cfg, myErr, auth)
	res.StartedAt, res.DurationS = started, elapsed.Seconds()
	res.Src, res.Dst = conn.LocalAddr().String(), conn.RemoteAddr().String()
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

func dial(ctx context.Context, spec probe.Spec, cfg config) (*net.UDPConn, error) {
	d := net.Dialer{Timeout: cfg.timeout, Control: engine.SockOpts{TOS: cfg.tos, RecvTOS: true, RecvTstamp: true}.Control()}
	if spec.Source != "" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(spec.Source)}
	}
	c, err := d.DialContext(ctx, "udp", cfg.target)
	if err != nil {
		return nil, fmt.Errorf("stamp to %s: %w", cfg.target, err)
	}
	return c.(*net.UDPConn), nil
}

func isRefused(err error) bool {
	return errors.Is(err, errConnRefused)
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// buildTest writes test packet seq into pkt (whose length is the test
// packet's size): base packet, CoS TLV asking for dscp on the reply,
// Timestamp Information request, the HMAC TLV in authenticated mode, and
// Extra Padding for the rest. TLVs leave the sender with the U flag set
// (RFC 8972 §4): the reflector clears it for those it understood.
func buildTest(pkt []byte, seq uint32, t1 int64, errEst ErrorEstimate, ssid uint16, dscp int, key []byte) {
	auth := key != nil
	base := BaseLenOf(auth)
	SenderPacket{Seq: seq, Timestamp: NTPTime(t1), ErrEst: errEst, SSID: ssid}.Put(pkt, auth)
	off := base
	CoS{DSCP1: uint8(dscp)}.Put(putTLV(pkt, off, FlagU, TypeClassOfService, 4))
	off += cosTLVLen
	putTLV(pkt, off, FlagU, TypeTimestampInfo, 4)
	off += tsiTLVLen
	if auth {
		v := putTLV(pkt, off, FlagU, TypeHMAC, HMACLen)
		m := tlvMAC(key, pkt, base, off)
		copy(v, m[:])
		off += hmacTLVLen
	}
	if rest := len(pkt) - off; rest >= tlvHdrLen {
		putTLV(pkt, off, FlagU, TypeExtraPadding, rest-tlvHdrLen)
	}
	if auth {
		SignBase(pkt, key)
	}
}

func (st *run) allAnswered() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range st.pkts {
		if !p.got {
			return false
		}
	}
	return true
}

func (st *run) answered() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, p := range st.pkts {
		if p.got {
			n++
		}
	}
	return n
}

// read takes reflected packets until ctx ends; each read waits at most
// 100 ms so the end is noticed.
func (st *run) read(ctx context.Context, conn *net.UDPConn, auth bool, key []byte, ssid uint16) error {
	buf := make([]byte, maxPacket)
	oob := make([]byte, 256)
	base := BaseLenOf(auth)
	for ctx.Err() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
		t4user := time.Now().UnixNano()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if isRefused(err) {
				return fmt.Errorf("the reflector's port refused the test packets (ICMP port unreachable): no reflector there or UDP blocked")
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receive reflected packet: %w", err)
		}
		pkt := buf[:n]
		rp, err := ParseReflector(pkt, auth)
		if err != nil {
			st.count(&st.foreign)
			continue
		}
		if auth && VerifyBase(pkt, key) != nil {
			st.count(&st.badHMAC)
			continue
		}
		if rp.SSID != 0 && rp.SSID != ssid {
			st.count(&st.foreign)
			continue
		}
		meta := parseCmsgs(oob[:oobn])
		r := reply{t2: rp.ErrEst.Decode(rp.RxTime), t3: rp.ErrEst.Decode(rp.Timestamp), reflSeq: rp.Seq, reflErr: rp.ErrEst,
			t4: meta.kernelNs, kernelRx: meta.kernelNs != 0, tos: meta.tos, tosOK: meta.tosOK}
		if !r.kernelRx {
			r.t4 = t4user
		}
		readTLVs(&r, pkt, base, key)
		st.mu.Lock()
		i := int(rp.SenderSeq)
		first := false
		var t1 int64
		switch {
		case i >= len(st.pkts):
			st.foreign++
		case st.pkts[i].got:
			st.dups++
		default:
			st.pkts[i].got, st.pkts[i].reply = true, r
			first, t1 = true, st.pkts[i].t1
		}
		st.mu.Unlock()
		if first && st.onReply != nil {
			// The round trip without the reflector's dwell, as the
			// result's rtt_ms counts it.
			st.onReply(probe.Reply{Seq: i, From: conn.RemoteAddr().String(), Bytes: n,
				RTTms: float64(r.t4-t1-(r.t3-r.t2)) / 1e6})
		}
	}
	return nil
}

func (st *run) count(c *int64) {
	st.mu.Lock()
	*c++
	st.mu.Unlock()
}

// readTLVs takes the reflector's answers from the reflected TLVs, after
// RFC 8972 §4's checks: nothing is used when an I flag is set or the HMAC
// TLV does not verify; processing stops at an M flag; U-flagged TLVs were
// not understood and are skipped.
func readTLVs(r *reply, pkt []byte, base int, key []byte) {
	tlvs, malformed := ParseTLVs(pkt, base)
	for _, t := range tlvs {
		if t.Flags&FlagI != 0 {
			r.tlvIssue = "the reflector flagged the TLVs' integrity (I): its key differs or it has none"
			return
		}
	}
	if key != nil && !verifyTLVs(key, pkt, base, tlvs) {
		r.tlvIssue = "the reflected HMAC TLV does not verify"
		return
	}
	for _, t := range tlvs {
		if t.Flags&FlagM != 0 {
			r.tlvIssue = "the reflector found a malformed TLV (M)"
			return
		}
		switch t.Type {
		case TypeClassOfService:
			r.cosFlags = t.Flags
			if t.Flags&FlagU == 0 && len(t.Value) == 4 {
				c := ParseCoS(t.Value)
				r.cos = &c
			}
		case TypeTimestampInfo:
			if t.Flags&FlagU == 0 && len(t.Value) == 4 {
				r.tsi = &TimestampInfo{t.Value[0], t.Value[1], t.Value[2], t.Value[3]}
			}
		}
	}
	if malformed >= 0 {
		r.tlvIssue = "the reflected packet's TLVs overrun it"
	}
}
