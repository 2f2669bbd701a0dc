package rr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// lowerSlack lowers this thread's timer slack and returns a function that
// puts the previous value back.
func lowerSlack() (func(), error) {
	prev, _, e := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_TIMERSLACK, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("prctl PR_GET_TIMERSLACK: %w", e)
	}
	if err := engine.LowerTimerSlack(); err != nil {
		return nil, err
	}
	return func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, prev, 0, 0, 0) }, nil
}

func setTimeouts(fd int, d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	return errors.Join(unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv), setSendTimeout(fd, d))
}

// setSendTimeout bounds blocking writes only. The kernel arms the send
// timeout's timer only when a write has to wait for buffer space, which
// one request in flight never does; a receive timeout would arm one
// around every blocking read.
func setSendTimeout(fd int, d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
}

func sockaddrString(fd int) string {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return ""
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return ""
}

// runUDP runs UDP transactions from a connected socket of its own to the
// responder's shared UDP port.
func runUDP(ctx context.Context, cfg config, spec probe.Spec, cl *engine.Client, onInterval func(probe.Interval)) (*tally, error) {
	ra, ok := cl.Ctrl.Conn().RemoteAddr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("responder address %v is not TCP", cl.Ctrl.Conn().RemoteAddr())
	}
	ap := ra.AddrPort()
	addr := ap.Addr().Unmap()
	family := unix.AF_INET
	var sa unix.Sockaddr
	if addr.Is6() {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: addr.As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: addr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := (engine.SockOpts{TOS: cfg.tos, RecvTstamp: true}).Apply(fd, addr.Is6()); err != nil {
		return nil, fmt.Errorf("UDP socket options: %w", err)
	}
	if spec.Source != "" {
		src, err := netip.ParseAddr(spec.Source)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", spec.Source, err)
		}
		src = src.Unmap()
		var bsa unix.Sockaddr
		switch {
		case addr.Is6() && src.Is6():
			bsa = &unix.SockaddrInet6{Addr: src.As16()}
		case addr.Is4() && src.Is4():
			bsa = &unix.SockaddrInet4{Addr: src.As4()}
		default:
			return nil, fmt.Errorf("source %s and responder %s are of different address families", src, addr)
		}
		if err := unix.Bind(fd, bsa); err != nil {
			return nil, fmt.Errorf("bind UDP socket to %s: %w", spec.Source, err)
		}
	}
	if err := setTimeouts(fd, cfg.timeout); err != nil {
		return nil, fmt.Errorf("UDP socket timeouts: %w", err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		return nil, fmt.Errorf("connect UDP socket to %s: %w", ap, err)
	}
	t := newTally()
	t.src = sockaddrString(fd)
	req := make([]byte, cfg.size)
	resp := make([]byte, cfg.size+engine.PacketHeaderLen+64)
	engine.PacketHeader{Type: engine.PacketRRRequest, Session: cl.Session}.Put(req)
	rb := body(req[engine.PacketHeaderLen:])
	var rx receiver
	timeout := cfg.timeout.Nanoseconds()
	timeoutChanged := false
	begin := time.Now()
	end := begin.Add(cfg.duration).UnixNano()
	clk := newWallClock()
	y := newYielder(cfg.interval == 0, clk)
	t.progress = newProgress(onInterval, cfg, begin)
	for i := int64(0); ; i++ {
		y.tick()
		t.progress.at(clk.last, t)
		pace(ctx, cfg, begin, i)
		tw := clk.now()
		if stop, byCtx := loopDone(ctx, cfg, i, tw, end); stop {
			t.stoppedByCtx = byCtx
			break
		}
		rb.setSeq(uint64(i))
		if timeoutChanged {
			if err := setTimeouts(fd, cfg.timeout); err != nil {
				return nil, fmt.Errorf("UDP socket timeouts: %w", err)
			}
			timeoutChanged = false
		}
		if err := writeAll(fd, req, nil); err != nil {
			if errors.Is(err, unix.ECONNREFUSED) {
				return nil, fmt.Errorf("responder's UDP port %d refused the request (ICMP port unreachable): responder gone or UDP blocked", ap.Port())
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				t.sent++
				continue
			}
			return nil, fmt.Errorf("send request %d: %w", i, err)
		}
		t.sent++
		deadline := tw + timeout
		for {
			n, krx, errno := rx.recv(fd, resp, 0)
			t1 := clk.now()
			switch errno {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				n = -1 // lost
			case unix.ECONNREFUSED:
				return nil, fmt.Errorf("responder's UDP port %d refused the request (ICMP port unreachable): responder gone or UDP blocked", ap.Port())
			default:
				return nil, fmt.Errorf("receive response %d: %w", i, errno)
			}
			if n < 0 {
				break
			}
			if h, ok := engine.ParsePacketHeader(resp[:n]); ok && h.Type == engine.PacketRRResponse &&
				h.Session == cl.Session && n >= engine.PacketHeaderLen+bodyLen {
				b := body(resp[engine.PacketHeaderLen:n])
				if b.seq() == uint64(i) {
					t.record(tw, tw, krx, t1, b)
					break
				}
			}
			// A late answer to an earlier request, or noise: wait out
			// the rest of this request's timeout.
			if t1 >= deadline {
				break
			}
			if err := setTimeouts(fd, time.Duration(deadline-t1)); err != nil {
				return nil, fmt.Errorf("UDP socket timeouts: %w", err)
			}
			timeoutChanged = true
		}
	}
	t.elapsed = time.Since(begin)
	t.progress.finish(clk.now(), t)
	return t, nil
}

// tcpConn is a data connection turned into a blocking descriptor for the
// transaction loop.
type tcpConn struct {
	fd int
}

func (c tcpConn) Close() { unix.Close(c.fd) }

// openTCP dials data connection stream. With recvTimeout its reads time
// out after timeout (crr: one read per connection); without, only its
// writes do and the caller bounds the reads (stallWatch).
func openTCP(ctx context.Context, cl *engine.Client, stream int, timeout time.Duration, recvTimeout bool) (tcpConn, error) {
	c, err := cl.DialData(ctx, stream)
	if err != nil {
		return tcpConn{}, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return tcpConn{}, fmt.Errorf("data connection is %T, not TCP", c)
	}
	// A blocking duplicate outside Go's poller; closing c takes the
	// socket out of the poller.
	fd, err := engine.DetachFd(tc)
	c.Close()
	if err != nil {
		return tcpConn{}, fmt.Errorf("data connection descriptor: %w", err)
	}
	set := setSendTimeout
	if recvTimeout {
		set = setTimeouts
	}
	if err := set(fd, timeout); err != nil {
		unix.Close(fd)
		return tcpConn{}, fmt.Errorf("data connection timeouts: %w", err)
	}
	return tcpConn{fd: fd}, nil
}

// runTCP runs transactions over one connection (tcp) or one connection
// each (crr).
func runTCP(ctx context.Context, cfg config, cl *engine.Client, onInterval func(probe.Interval)) (*tally, error) {
	crr := cfg.proto == ProtoCRR
	t := newTally()
	var conn tcpConn
	// The long connection's reads are bounded by a stall watch, not by a
	// receive timeout (see stallWatch).
	var watch *stallWatch
	if !crr {
		var err error
		if conn, err = openTCP(ctx, cl, 0, cfg.timeout, false); err != nil {
			return nil, err
		}
		defer conn.Close()
		watch = watchStalls(conn.fd, cfg.timeout)
		defer watch.stop()
		t.src = sockaddrString(conn.fd)
	}
	req := make([]byte, cfg.size)
	resp := make([]byte, cfg.size)
	rb := body(req)
	var rx receiver
	var peek peekPolicy
	begin := time.Now()
	end := begin.Add(cfg.duration).UnixNano()
	clk := newWallClock()
	y := newYielder(cfg.interval == 0, clk)
	t.progress = newProgress(onInterval, cfg, begin)
	// now is the loop's clock between transactions: the previous
	// transaction's end, read again only when the loop slept (pace) or for
	// crr's connect, so a transaction costs two clock readings.
	now := begin.UnixNano()
	for i := int64(0); ; i++ {
		y.tick()
		t.progress.at(clk.last, t)
		if cfg.interval > 0 && i > 0 {
			if watch != nil {
				watch.since.Store(0) // nothing waits while the loop sleeps
			}
			pace(ctx, cfg, begin, i)
			now = clk.now()
		}
		t0 := now
		if crr {
			t0 = clk.now()
		}
		if stop, byCtx := loopDone(ctx, cfg, i, t0, end); stop {
			t.stoppedByCtx = byCtx
			break
		}
		if crr {
			var err error
			if conn, err = openTCP(ctx, cl, int(i&0x7fffffff), cfg.timeout, true); err != nil {
				return nil, fmt.Errorf("transaction %d: %w", i, err)
			}
			if t.src == "" {
				t.src = sockaddrString(conn.fd)
			}
		}
		rb.setSeq(uint64(i))
		tw := clk.now()
		if crr {
			t0 = min(t0, tw)
		} else {
			t0 = tw
		}
		if watch != nil {
			watch.since.Store(tw)
		}
		if err := writeAll(conn.fd, req, nil); err != nil {
			if watch != nil && watch.stalled.Load() {
				return nil, fmt.Errorf("send request %d: not sent within %v", i, cfg.timeout)
			}
			return nil, fmt.Errorf("send request %d: %w", i, err)
		}
		t.sent++
		var krx int64
		for got := 0; got < len(resp); {
			var n int
			var ts int64
			errno := unix.EAGAIN
			if got == 0 && !crr && peek.try() {
				n, ts, errno = rx.recvWaiting(conn.fd, resp)
				peek.result(errno != unix.EAGAIN)
			}
			if errno == unix.EAGAIN {
				n, ts, errno = rx.recv(conn.fd, resp[got:], 0)
			}
			switch {
			case errno == unix.EINTR:
				continue
			case errno == unix.EAGAIN, (errno != 0 || n == 0) && watch != nil && watch.stalled.Load():
				return nil, fmt.Errorf("no response to request %d within %v", i, cfg.timeout)
			case errno != 0:
				return nil, fmt.Errorf("receive response %d: %w", i, errno)
			case n == 0:
				return nil, fmt.Errorf("receive response %d: responder closed the connection", i)
			}
			got += n
			if ts != 0 {
				krx = ts
			}
		}
		t1 := clk.now()
		now = t1
		if crr {
			conn.Close()
		}
		b := body(resp)
		if b.seq() != uint64(i) {
			return nil, fmt.Errorf("response %d carries sequence %d: stream out of step", i, b.seq())
		}
		t.record(tw, t0, krx, t1, b)
	}
	t.elapsed = time.Since(begin)
	t.progress.finish(clk.now(), t)
	return t, nil
}

// writeAll writes b to the blocking descriptor fd. It first tries once
// without blocking, as a raw system call: a request or a reply fits the
// socket's buffer, so that write never waits, and a raw call skips the Go
// runtime's bookkeeping around a system call that may block (the P hand-off
// preparation on entry and exit, inside every round trip). What that try
// did not write is written with plain blocking writes, bounded by the
// socket's send timeout; when one times out, writeAll goes on while
// again (nil: never) says so.
func writeAll(fd int, b []byte, again func() bool) error {
	if len(b) == 0 {
		return nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
	switch {
	case e == 0:
		b = b[n:]
	case e != unix.EAGAIN && e != unix.EINTR:
		return e
	}
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				if again != nil && again() {
					continue
				}
				return errors.New("send timed out")
			}
			return err
		}
		b = b[n:]
	}
	return nil
}
