package rr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/tcp"
)

// Handler is the responder side of the rr probe. It opens no sockets: UDP
// requests arrive through the session's shared socket, TCP ones on the
// session's data connections.
type Handler struct {
	// delay holds every answer back (tests: a responder that dwells, whose
	// dwell rtt_ms must not include).
	delay time.Duration
	// onEnd sees each session's closing figures (tests).
	onEnd func(endResult)
}

// Kind returns "rr".
func (Handler) Kind() string { return probe.KindRR }

// Serve answers the session's transactions until the client says stop.
func (h Handler) Serve(ctx context.Context, s *engine.Session) error {
	cfg, err := validate(s.Spec)
	if err != nil {
		return fmt.Errorf("invalid rr probe: %w", err)
	}
	// The session lasts the test plus slack; a count-only test is bounded
	// by one timeout per transaction.
	bound := cfg.duration
	if cfg.count > 0 {
		bound = max(bound, time.Duration(cfg.count)*cfg.timeout)
	}
	sctx, cancel := context.WithTimeout(ctx, bound+2*endTimeout+engine.DefaultControlTimeout)
	defer cancel()
	// The requests' kernel receive times give the dwell; have the kernel
	// stamp packets before the client gets the go-ahead.
	defer engine.HoldRxTimestamps(rxStampWait)()
	var served atomic.Int64
	cpu0 := engine.SampleCPU()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var udp *udpServer
	if cfg.proto == ProtoUDP {
		udp = newUDPServer(sctx, s, cfg, &served, h.delay)
		defer udp.stop()
		s.HandlePackets(udp.reflector())
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acceptLoop(sctx, s, cfg, &served, h.delay)
		}()
	}
	// The go-ahead: requests sent before HandlePackets would be dropped
	// by the responder, so the client waits for this.
	if err := s.Ctrl.Send(sctx, engine.Message{Type: engine.MsgReady}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	m, err := s.Ctrl.RecvNoDeadline(sctx)
	if err != nil {
		return fmt.Errorf("wait for the client's stop: %w", err)
	}
	if m.Type != engine.MsgStop {
		return fmt.Errorf("control protocol: want %q, got %q", engine.MsgStop, m.Type)
	}
	if udp != nil {
		udp.stop() // its counts are final
	}
	end := endResult{Served: served.Load(), CPUPct: probe.Float(engine.CPUPercent(cpu0, engine.SampleCPU()))}
	if udp != nil {
		n := udp.bySession.Load()
		end.SessionSocket = &n
		end.SharedOnly = udp.sharedOnly()
	}
	if h.onEnd != nil {
		h.onEnd(end)
	}
	b, err := json.Marshal(end)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	ectx, ecancel := context.WithTimeout(ctx, endTimeout)
	defer ecancel()
	return s.Ctrl.Send(ectx, engine.Message{Type: engine.MsgResult, Data: b})
}

// acceptLoop serves each data connection of the session (one for tcp, one
// per transaction for crr) until ctx ends.
func acceptLoop(ctx context.Context, s *engine.Session, cfg config, served *atomic.Int64, delay time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		dc, err := s.AcceptData(ctx)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dc.Close()
			stop := context.AfterFunc(ctx, func() { _ = dc.SetDeadline(time.Unix(1, 0)) })
			defer stop()
			var err error
			if cfg.proto == ProtoTCP {
				err = serveInThread(ctx, dc.Conn, cfg, served, delay)
			} else {
				err = serveConn(dc.Conn, cfg, served, delay)
			}
			if err != nil {
				s.Log.Debug("rr connection", "stream", dc.Stream, "err", err)
			}
		}()
	}
}

// serveConn answers requests on one TCP connection until it closes.
func serveConn(c net.Conn, cfg config, served *atomic.Int64, delay time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("data connection is %T, not TCP", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var optErr error
	if err := rc.Control(func(fd uintptr) {
		optErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || optErr != nil {
		return fmt.Errorf("SO_TIMESTAMPNS: %w", errors.Join(err, optErr))
	}
	_ = tcp.EnableArrivedTOS(c)
	if cfg.tos != 0 {
		setTOS(rc, c, cfg.tos)
	}
	buf := make([]byte, cfg.size)
	var rx receiver
	clk := newWallClock()
	tosKnown := false
	var tos int
	var tosOK bool
	for {
		var krx int64
		for got := 0; got < len(buf); {
			n, ts, err := readMsg(rc, &rx, buf[got:])
			if err != nil {
				return err
			}
			if n == 0 {
				if got == 0 {
					return nil // the client closed between transactions
				}
				return errors.New("client closed mid-request")
			}
			got += n
			if ts != 0 {
				krx = ts
			}
		}
		if !tosKnown {
			tos, tosOK, _ = tcp.ArrivedTOS(c)
			tosKnown = true
		}
		body(buf).stampReply(clk, krx, tos, tosOK, delay)
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("reply: %w", err)
		}
		served.Add(1)
	}
}

// stampReply fills a request's body in as the reply: the flags, the
// arrival TOS when known, the receive time (the kernel's krx, or now when
// krx is 0), then, after delay, the transmit time, read from clk.
func (b body) stampReply(clk *wallClock, krx int64, tos int, tosOK bool, delay time.Duration) {
	var flags byte
	if krx != 0 {
		flags |= flagKernelRx
	} else {
		krx = clk.now()
	}
	if tosOK {
		b[offTOS] = byte(tos)
		flags |= flagTOSValid
	}
	b[offFlags] = flags
	b.setRx(krx)
	if delay > 0 {
		time.Sleep(delay)
	}
	b.setTx(clk.now())
}

// readMsg reads once through the Go poller, with the kernel timestamp.
func readMsg(rc syscall.RawConn, rx *receiver, buf []byte) (int, int64, error) {
	var n int
	var ts int64
	var errno unix.Errno
	err := rc.Read(func(fd uintptr) bool {
		n, ts, errno = rx.recv(int(fd), buf, unix.MSG_DONTWAIT)
		return errno != unix.EAGAIN
	})
	if err != nil {
		return 0, 0, err
	}
	if errno != 0 {
		return 0, 0, errno
	}
	return n, ts, nil
}

// pollWait bounds one blocking read or write of the UDP session socket's
// loop, and a blocking write of serveInThread, so that they see ctx end.
const pollWait = 50 * time.Millisecond

// serveInThread is serveConn for a long tcp connection, served the way the
// client runs its loop: with blocking system calls on a duplicate
// descriptor, the connection taken out of Go's poller, so that the thread
// blocked in the read is the one a request wakes: no wake-up of the
// poller's thread for every segment, no hand-off of the goroutine to
// another thread (together several microseconds of each round trip, and
// CPU). The goroutine is not locked to its thread (see yielder). Its reads
// block with no timeout: ctx's end shuts the connection down, which ends
// a blocked read (a receive timeout would make the kernel arm and cancel a
// timer around every wait for a request, inside each round trip).
func serveInThread(ctx context.Context, c net.Conn, cfg config, served *atomic.Int64, delay time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("data connection is %T, not TCP", c)
	}
	_ = tcp.EnableArrivedTOS(c)
	if cfg.tos != 0 {
		if rc, err := tc.SyscallConn(); err == nil {
			setTOS(rc, c, cfg.tos)
		}
	}
	// A blocking duplicate outside Go's poller; closing c (below) takes
	// the socket out of the poller.
	fd, err := engine.DetachFd(tc)
	if err != nil {
		return fmt.Errorf("data connection descriptor: %w", err)
	}
	// ctx's end, checked between transactions without a lock, and a
	// shutdown that wakes a blocked read.
	var end shutdownOnEnd
	stopEnd := context.AfterFunc(ctx, func() { end.fire(fd) })
	defer func() {
		stopEnd()
		end.release()
		unix.Close(fd)
	}()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	if err := setSendTimeout(fd, pollWait); err != nil {
		return fmt.Errorf("data connection timeouts: %w", err)
	}
	// c stays open (and in the poller) until the first request's TOS is
	// read through it.
	tosKnown := false
	var tos int
	var tosOK bool
	defer func() {
		if !tosKnown {
			c.Close()
		}
	}()
	// A reply's write that waits for buffer space goes on until ctx ends.
	writeAgain := func() bool { return !end.ended.Load() }
	buf := make([]byte, cfg.size)
	var rx receiver
	clk := newWallClock()
	y := newYielder(true, clk)
	for {
		y.tick()
		if end.ended.Load() {
			return ctx.Err()
		}
		var krx int64
		for got := 0; got < len(buf); {
			n, ts, errno := rx.recv(fd, buf[got:], 0)
			switch {
			case end.ended.Load() && (errno != 0 || n == 0):
				return ctx.Err()
			case errno == unix.EAGAIN || errno == unix.EINTR:
				continue
			case errno != 0:
				return errno
			case n == 0:
				if got == 0 {
					return nil // the client closed between transactions
				}
				return errors.New("client closed mid-request")
			}
			got += n
			if ts != 0 {
				krx = ts
			}
		}
		if !tosKnown {
			tos, tosOK, _ = tcp.ArrivedTOS(c)
			tosKnown = true
			c.Close()
		}
		body(buf).stampReply(clk, krx, tos, tosOK, delay)
		if err := writeAll(fd, buf, writeAgain); err != nil {
			if end.ended.Load() {
				return ctx.Err()
			}
			return fmt.Errorf("reply: %w", err)
		}
		served.Add(1)
	}
}

// setTOS marks the responder's replies with the client's TOS.
func setTOS(rc syscall.RawConn, c net.Conn, tos int) {
	v6 := false
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		v6 = a.IP.To4() == nil
	}
	_ = rc.Control(func(fd uintptr) {
		_ = engine.SockOpts{TOS: tos}.Apply(int(fd), v6)
	})
}
