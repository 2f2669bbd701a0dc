package iperf3wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/tcp"
)

// Client defaults where the spec leaves a figure open.
const (
	DefaultDuration = 10 * time.Second
	DefaultUDPLen   = 1460 // iperf3's DEFAULT_UDP_BLKSIZE
	DefaultUDPRate  = 1_000_000
)

// errorTexts are iperf3's words for the error codes a server sends most.
var errorTexts = map[int32]string{
	errDuration: "test duration too long", errNumStreams: "number of parallel streams too large",
	errBlockSize: "block size too large", errUnsupported: "an option you are trying to set is not implemented yet",
	errUDPBlock: "block size invalid", 121: "the server is busy running a test", errProtocol: "protocol does not exist",
	142: "test authorization failed",
}

// ServerError is an iperf3 server's refusal (its SERVER_ERROR state).
type ServerError struct{ Code, Errno int32 }

func (e *ServerError) Error() string {
	msg := fmt.Sprintf("iperf3 server refused the test: error %d", e.Code)
	if t, ok := errorTexts[e.Code]; ok {
		msg += " (" + t + ")"
	}
	if e.Errno != 0 {
		msg += fmt.Sprintf(", errno %d", e.Errno)
	}
	return msg
}

// ValidateClient checks a tcp or udp spec for a run against an iperf3
// server: only what iperf3's protocol carries.
func ValidateClient(spec probe.Spec) error {
	var errs []error
	if spec.Kind != probe.KindTCP && spec.Kind != probe.KindUDP {
		errs = append(errs, fmt.Errorf("--peer iperf3 measures tcp or udp, not %s", spec.Kind))
	}
	if _, _, err := net.SplitHostPort(spec.Target); err != nil {
		errs = append(errs, fmt.Errorf("target %q: want HOST:PORT of an iperf3 server: %w", spec.Target, err))
	}
	if d := spec.Duration.D(); d < 0 || d > maxTime*time.Second {
		errs = append(errs, fmt.Errorf("duration %v: want up to %d s", d, maxTime))
	}
	if spec.Streams < 0 || spec.Streams > maxStreams {
		errs = append(errs, fmt.Errorf("streams %d: want 1-%d", spec.Streams, maxStreams))
	}
	if spec.Kind == probe.KindUDP && spec.Size != 0 && (spec.Size < minUDPBlock || spec.Size > maxUDPBlock) {
		errs = append(errs, fmt.Errorf("size %d: iperf3 UDP datagrams are %d-%d bytes", spec.Size, minUDPBlock, maxUDPBlock))
	}
	if spec.Kind == probe.KindTCP && (spec.Size < 0 || spec.Size > maxBlockSize) {
		errs = append(errs, fmt.Errorf("size %d: iperf3 TCP writes are up to %d bytes", spec.Size, maxBlockSize))
	}
	if spec.TOS != nil && (*spec.TOS < 0 || *spec.TOS > 255) {
		errs = append(errs, fmt.Errorf("tos %d: want 0-255", *spec.TOS))
	}
	if spec.WindowBytes < 0 || spec.WindowBytes > maxWindow {
		errs = append(errs, fmt.Errorf("window %d: iperf3 takes up to %d bytes", spec.WindowBytes, maxWindow))
	}
	if spec.MSS < 0 || spec.MSS > maxMSS || (spec.MSS != 0 && spec.Kind != probe.KindTCP) {
		errs = append(errs, fmt.Errorf("mss %d: iperf3 sets a TCP MSS of up to %d bytes", spec.MSS, maxMSS))
	}
	if spec.Interval > 0 && spec.Interval.D() < tcp.MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v, as iperf3's -i", spec.Interval.D(), tcp.MinInterval))
	}
	for name, set := range map[string]bool{
		"--count": spec.Count != 0, "--proto": spec.Proto != "", "--offload": spec.Offload != "",
	} {
		if set {
			errs = append(errs, fmt.Errorf("%s is not carried to an iperf3 server by cnperf", name))
		}
	}
	return errors.Join(errs...)
}

// clientStream is one data stream on the client's side.
type clientStream struct {
	conn  net.Conn
	recv  *udpRecv // udp, the client receives
	bytes atomic.Uint64
	pkts  atomic.Int64
}

// clientParams are the test parameters the client sends for spec, and the
// test's duration.
func clientParams(spec probe.Spec) (Params, time.Duration) {
	p := Params{TCP: spec.Kind == probe.KindTCP, UDP: spec.Kind == probe.KindUDP, Reverse: spec.Reverse,
		Parallel: max(spec.Streams, 1), Len: spec.Size, Window: spec.WindowBytes, MSS: spec.MSS}
	if spec.TOS != nil {
		p.TOS = *spec.TOS
	}
	dur := spec.Duration.D()
	if dur == 0 {
		dur = DefaultDuration
	}
	p.Time = int(math.Ceil(dur.Seconds())) // the server's own limit; this side ends the test
	if p.Len == 0 {
		p.Len = map[bool]int{true: DefaultUDPLen, false: defaultTCPLen}[p.UDP]
	}
	switch {
	case spec.RateBps != nil:
		// A spec's rate is the total over its streams; iperf3's
		// bandwidth is per stream.
		p.Bandwidth = *spec.RateBps / uint64(p.Parallel)
	case p.UDP:
		p.Bandwidth = DefaultUDPRate
	}
	return p, dur
}

// Run measures spec (tcp or udp) against the iperf3 server at spec.Target
// over iperf3's protocol and returns cnperf's result, which echoes the
// spec's request as a registry's run does. onInterval, when not nil,
// receives the client's interval reports at spec's interval (1 s unset)
// as the test runs, summed over its streams as iperf3's client prints them.
func Run(ctx context.Context, spec probe.Spec, onInterval func(probe.Interval)) (*probe.Result, error) {
	res, err := run(ctx, spec, onInterval)
	if res != nil {
		res.Request = spec.Request()
	}
	return res, err
}

func run(ctx context.Context, spec probe.Spec, onInterval func(probe.Interval)) (*probe.Result, error) {
	if err := ValidateClient(spec); err != nil {
		return nil, err
	}
	p, dur := clientParams(spec)
	step := spec.Timeout.D()
	if step <= 0 {
		step = stepTimeout
	}
	dialer := net.Dialer{Timeout: step}
	if spec.Source != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(spec.Source)}
	}
	c, err := dialer.DialContext(ctx, "tcp", spec.Target)
	if err != nil {
		return nil, fmt.Errorf("connect to iperf3 server %s: %w", spec.Target, err)
	}
	defer c.Close()
	// An interrupt (ctx ending) before the test runs closes the control
	// connection; once it runs, it ends the test as its timer would, and
	// the results are still exchanged (each step bounded by its deadline),
	// so the summary covers what was measured, as iperf3's on Ctrl-C.
	var testing atomic.Bool
	watch, unwatch := context.WithCancel(context.WithoutCancel(ctx))
	defer unwatch()
	defer context.AfterFunc(ctx, func() {
		if !testing.Load() {
			unwatch()
		}
	})()
	defer closeOnDone(watch, c)()
	cc := ctrl{c}
	cookie := NewCookie()
	cc.deadline(step)
	if _, err := c.Write(cookie[:]); err != nil {
		return nil, fmt.Errorf("iperf3: send cookie: %w", err)
	}
	expect := func(want int8, wait time.Duration) error {
		got, err := cc.readState(wait)
		if err != nil {
			return err
		}
		switch {
		case got == want:
			return nil
		case got == stateServerError:
			code, errno, err := cc.readErrorCodes()
			if err != nil {
				return fmt.Errorf("iperf3 server error, unreadable: %w", err)
			}
			return &ServerError{Code: code, Errno: errno}
		case got == stateAccessDenied:
			return &ServerError{Code: 121}
		case got == stateServerTerminate:
			return errors.New("iperf3 server terminated the test")
		}
		return fmt.Errorf("iperf3 control: want state %d, got %d", want, got)
	}
	if err := expect(stateParamExchange, step); err != nil {
		return nil, err
	}
	if err := cc.writeJSON(p.wire()); err != nil {
		return nil, err
	}
	if err := expect(stateCreateStreams, step); err != nil {
		return nil, err
	}
	streams := make([]*clientStream, 0, p.Parallel)
	defer func() {
		for _, st := range streams {
			_ = st.conn.Close()
		}
	}()
	for range p.Parallel {
		st, err := openStream(ctx, spec, p, cookie, step)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	}
	if err := expect(stateTestStart, step); err != nil {
		return nil, err
	}
	if err := expect(stateTestRunning, step); err != nil {
		return nil, err
	}
	testing.Store(true)
	started := time.Now()
	cpu0 := engine.SampleCPU()
	runCtx, stop := context.WithTimeout(ctx, dur)
	defer stop()
	var wg sync.WaitGroup
	var running atomic.Bool
	running.Store(true)
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runClientStream(runCtx, p, st, &running)
		}()
	}
	var ivs *clientIntervals
	ivDone := make(chan struct{})
	if onInterval != nil {
		ivs = newClientIntervals(p, streams, started, spec.IntervalOr(time.Second), onInterval)
		go ivs.run(runCtx, ivDone)
	}
	<-runCtx.Done()
	interrupted := ctx.Err() != nil
	running.Store(false)
	ended := time.Now()
	elapsed := ended.Sub(started).Seconds()
	if ivs != nil {
		<-ivDone // its last sample precedes the streams' final figures
	}

	cpu1 := engine.SampleCPU()
	ours := results{SenderHasRetransmits: -1}
	snap := make([]streamResult, len(streams))
	var retrans int64
	for i, st := range streams {
		snap[i] = streamResult{ID: float64(streamID(i)), Bytes: float64(st.bytes.Load()), Retransmits: -1, EndTime: elapsed}
		if st.recv != nil {
			u := st.recv.snapshot()
			snap[i].Bytes, snap[i].Jitter, snap[i].Errors, snap[i].Packets = float64(u.bytes), u.jitter, float64(u.lost), float64(u.highest)
		} else if p.UDP {
			snap[i].Packets = float64(st.pkts.Load())
		}
		if p.TCP && !p.Reverse {
			if n, err := tcp.Retransmits(st.conn); err == nil {
				snap[i].Retransmits = float64(n)
				retrans += n
				ours.SenderHasRetransmits = 1
			}
		}
	}
	if p.UDP && !p.Reverse {
		ours.SenderHasRetransmits = 0
	}
	if ivs != nil {
		ivs.finish(ended, snap)
	}
	// Stop sending; a receiving client drains until the server closes.
	for _, st := range streams {
		if !p.Reverse {
			_ = st.conn.SetWriteDeadline(time.Now())
		}
	}
	if err := cc.writeState(stateTestEnd); err != nil {
		return nil, err
	}
	if err := expect(stateExchangeResults, step); err != nil {
		return nil, err
	}
	for _, st := range streams {
		_ = st.conn.SetDeadline(time.Now())
	}
	wg.Wait()
	ours.setCPU(engine.CPUUseBetween(cpu0, cpu1))
	if p.TCP && len(streams) > 0 {
		if sc, ok := streams[0].conn.(syscall.Conn); ok {
			ours.CongestionUsed = engine.ConnCongestion(sc)
		}
	}
	ours.Streams = snap
	if err := cc.writeJSON(ours); err != nil {
		return nil, err
	}
	var theirs results
	if err := cc.readJSON(&theirs); err != nil {
		return nil, fmt.Errorf("iperf3 server's results: %w", err)
	}
	if err := expect(stateDisplayResults, step); err != nil {
		return nil, err
	}
	_ = cc.writeState(stateIperfDone)
	res := buildResult(spec, p, c, started, elapsed, ours, theirs, retrans)
	if interrupted {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// openStream opens one data stream as iperf3's client does: a TCP
// connection that sends the cookie, or a UDP socket that sends the connect
// datagram and waits for the reply.
func openStream(ctx context.Context, spec probe.Spec, p Params, cookie [CookieSize]byte, step time.Duration) (*clientStream, error) {
	// The data sockets carry -S, -w and -M from before they connect, as
	// iperf3's client sets them (the SYN marked too).
	opts := engine.SockOpts{TOS: p.TOS, WindowBytes: p.Window}
	if p.TCP {
		opts.MSS = p.MSS
		d := net.Dialer{Timeout: step, Control: opts.Control()}
		if spec.Source != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(spec.Source)}
		}
		c, err := d.DialContext(ctx, "tcp", spec.Target)
		if err != nil {
			return nil, fmt.Errorf("iperf3 data connection: %w", err)
		}
		_ = c.SetWriteDeadline(time.Now().Add(step))
		if _, err := c.Write(cookie[:]); err != nil {
			c.Close()
			return nil, fmt.Errorf("iperf3 data connection: send cookie: %w", err)
		}
		_ = c.SetWriteDeadline(time.Time{})
		return &clientStream{conn: c}, nil
	}
	d := net.Dialer{Timeout: step, Control: opts.Control()}
	if spec.Source != "" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(spec.Source)}
	}
	c, err := d.DialContext(ctx, "udp", spec.Target)
	if err != nil {
		return nil, fmt.Errorf("iperf3 UDP stream: %w", err)
	}
	if uc, ok := c.(*net.UDPConn); ok && p.Window == 0 {
		_ = uc.SetReadBuffer(4 << 20)
		_ = uc.SetWriteBuffer(4 << 20)
	}
	var msg [4]byte
	binary.NativeEndian.PutUint32(msg[:], udpConnectMsg)
	_ = c.SetDeadline(time.Now().Add(step))
	if _, err := c.Write(msg[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("iperf3 UDP stream: send connect: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("iperf3 UDP stream: no reply from the server: %w", err)
		}
		if n == 4 {
			if m := binary.NativeEndian.Uint32(buf[:4]); m == udpConnectReply || m == legacyUDPReply {
				break
			}
		}
		// In reverse mode data may overtake the reply; skip it.
	}
	_ = c.SetDeadline(time.Time{})
	st := &clientStream{conn: c}
	if p.Reverse {
		st.recv = &udpRecv{counters64: p.Counters64}
	}
	return st, nil
}

// runClientStream sends or receives on one stream until ctx ends (sending)
// or its deadline is set (receiving).
func runClientStream(ctx context.Context, p Params, st *clientStream, running *atomic.Bool) {
	stopOnDone := context.AfterFunc(ctx, func() {
		if !p.Reverse {
			_ = st.conn.SetWriteDeadline(time.Now())
		}
	})
	defer stopOnDone()
	switch {
	case !p.Reverse && p.TCP:
		sendTCP(ctx, st.conn, p, &st.bytes)
	case !p.Reverse: // udp
		sendUDP(ctx, p, &st.bytes, &st.pkts, st.conn.Write, func(err error) bool {
			return errors.Is(err, net.ErrClosed) || errors.Is(err, ctx.Err()) || isTimeout(err)
		})
	case p.TCP: // reverse: receive until the deadline after TEST_END
		recvTCP(st.conn, p, &st.bytes, running)
	default: // reverse udp
		buf := make([]byte, 64<<10)
		for {
			n, err := st.conn.Read(buf)
			if err != nil {
				return
			}
			if running.Load() {
				st.recv.add(buf[:n], time.Now())
			}
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// buildResult turns both sides' figures into cnperf's result keys.
func buildResult(spec probe.Spec, p Params, c net.Conn, started time.Time, elapsed float64, ours, theirs results, retrans int64) *probe.Result {
	res := &probe.Result{Kind: spec.Kind, Tool: "cnperf", Src: c.LocalAddr().String(), Dst: c.RemoteAddr().String(),
		StartedAt: started, DurationS: elapsed, TOS: p.TOS, DSCP: p.TOS >> 2,
		Notes: []string{"measured against an iperf3 server over iperf3's protocol (--peer iperf3)"}}
	byID := map[int]streamResult{}
	for _, s := range theirs.Streams {
		byID[int(s.ID)] = s
	}
	var sentB, recvB, sentT, recvT float64
	var pktsSent, lost, recvPkts int64
	var jitter float64
	peerRetrans, peerHasRetrans := int64(0), known(theirs.SenderHasRetransmits) && theirs.SenderHasRetransmits == 1
	for i, mine := range ours.Streams {
		peer := byID[int(mine.ID)]
		sr := probe.StreamResult{ID: int(mine.ID)}
		mySecs, peerSecs := mine.EndTime-mine.StartTime, peer.EndTime-peer.StartTime
		if peerSecs <= 0 {
			peerSecs = mySecs
		}
		if !p.Reverse {
			sr.Bytes = probe.SenderReceiver{Sender: mine.Bytes, Receiver: peer.Bytes}
			sr.ThroughputBps = probe.SenderReceiver{Sender: rate(mine.Bytes, mySecs), Receiver: rate(peer.Bytes, peerSecs)}
			if known(mine.Retransmits) && p.TCP {
				sr.Retransmits = probe.Int64(int64(mine.Retransmits))
			}
			pktsSent += int64(mine.Packets)
			lost += int64(peer.Errors)
			recvPkts += int64(peer.Packets - peer.Errors)
			jitter += peer.Jitter
		} else {
			sr.Bytes = probe.SenderReceiver{Sender: peer.Bytes, Receiver: mine.Bytes}
			sr.ThroughputBps = probe.SenderReceiver{Sender: rate(peer.Bytes, peerSecs), Receiver: rate(mine.Bytes, mySecs)}
			if peerHasRetrans && known(peer.Retransmits) {
				sr.Retransmits = probe.Int64(int64(peer.Retransmits))
				peerRetrans += int64(peer.Retransmits)
			}
			pktsSent += int64(peer.Packets)
			lost += int64(mine.Errors)
			recvPkts += int64(mine.Packets - mine.Errors)
			jitter += mine.Jitter
		}
		sentB += sr.Bytes.Sender
		recvB += sr.Bytes.Receiver
		if i == 0 { // iperf3 takes the first stream's times for the sums
			sentT, recvT = mySecs, peerSecs
			if p.Reverse {
				sentT, recvT = peerSecs, mySecs
			}
		}
		res.Streams = append(res.Streams, sr)
	}
	res.Bytes = &probe.SenderReceiver{Sender: sentB, Receiver: recvB}
	res.ThroughputBps = &probe.SenderReceiver{Sender: rate(sentB, sentT), Receiver: rate(recvB, recvT)}
	mine, peer := ours.cpuUse(), theirs.cpuUse()
	cong := &probe.SenderReceiverNames{Sender: ours.CongestionUsed, Receiver: theirs.CongestionUsed}
	if p.Reverse {
		mine, peer = peer, mine
		cong.Sender, cong.Receiver = cong.Receiver, cong.Sender
	}
	res.SetCPU(mine.Pct, peer.Pct, mine, peer)
	if p.TCP && (cong.Sender != "" || cong.Receiver != "") {
		res.TCPCongestion = cong
	}
	if p.TCP {
		switch {
		case !p.Reverse && ours.SenderHasRetransmits == 1:
			res.Retransmits = probe.Int64(retrans)
		case p.Reverse && peerHasRetrans:
			res.Retransmits = probe.Int64(peerRetrans)
		}
		return res
	}
	res.Packets = &probe.PacketCounts{Sent: pktsSent, Received: recvPkts, Lost: lost}
	if pktsSent > 0 {
		res.LossPct = probe.Float(100 * float64(lost) / float64(pktsSent))
	}
	res.JitterMs = probe.Float(1000 * jitter / float64(max(len(ours.Streams), 1)))
	if recvT > 0 {
		res.PPS = probe.Float(float64(recvPkts) / recvT)
	}
	return res
}

func rate(bytes, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return bytes * 8 / secs
}
