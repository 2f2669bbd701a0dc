package rr

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// udpServer answers a UDP rr session. The first requests arrive on the
// responder's shared socket and are answered from there (udpReflector);
// the first one also opens the session's own socket on the same port,
// connected to the client (engine.Session.PeerSocket), and from then on a
// locked thread answers on it with blocking system calls, outside Go's
// poller, the way the TCP rr connection is served (serveInThread). Where
// the responder cannot give the session a socket, the shared socket keeps
// answering.
type udpServer struct {
	s      *engine.Session
	cfg    config
	served *atomic.Int64
	delay  time.Duration
	peer   *engine.PeerLoop
	// bySession counts the transactions the session socket answered.
	bySession atomic.Int64
}

func newUDPServer(ctx context.Context, s *engine.Session, cfg config, served *atomic.Int64, delay time.Duration) *udpServer {
	u := &udpServer{s: s, cfg: cfg, served: served, delay: delay}
	u.peer = engine.NewPeerLoop(ctx, s, engine.SockOpts{TOS: cfg.tos, RecvTOS: true, RecvTstamp: true}, u.serve)
	return u
}

// stop ends the session socket's loop and waits for it.
func (u *udpServer) stop() { u.peer.Stop() }

// sharedOnly says why the session socket could not be opened ("" when it
// was, or was not tried); call it after stop.
func (u *udpServer) sharedOnly() string {
	if err := u.peer.OpenErr(); err != nil {
		return err.Error()
	}
	return ""
}

// reflector answers requests that reach the shared socket, from the
// responder's UDP reader goroutine, into one reused buffer.
func (u *udpServer) reflector() engine.PacketFunc {
	buf := make([]byte, 64<<10)
	clk := newWallClock()
	return func(pkt []byte, from netip.AddrPort, rx engine.RxInfo) {
		h, ok := engine.ParsePacketHeader(pkt)
		if !ok || h.Type != engine.PacketRRRequest || len(pkt) < engine.PacketHeaderLen+bodyLen {
			return
		}
		n := copy(buf, pkt)
		buf[2] = engine.PacketRRResponse
		body(buf[engine.PacketHeaderLen:n]).stampReply(clk, rx.KernelNs, rx.TOS, rx.TOSOK, u.delay)
		if err := u.s.WriteTo(buf[:n], from); err != nil {
			u.s.Log.Debug("rr reply", "to", from, "err", err)
			return
		}
		u.served.Add(1)
		u.peer.Open(from)
	}
}

// serve answers requests on the session's connected socket fd until stop.
func (u *udpServer) serve(fd int, ended *atomic.Bool) error {
	// A blocked read ends when stop shuts the socket's receive side; the
	// receive timeout is there in case it does not.
	if err := setTimeouts(fd, pollWait); err != nil {
		return err
	}
	buf := make([]byte, u.cfg.size+engine.PacketHeaderLen+64)
	var (
		msg unix.Msghdr
		iov unix.Iovec
		oob [256]byte
	)
	session := u.s.ID
	clk := newWallClock()
	y := newYielder(true, clk)
	for !ended.Load() {
		y.tick()
		iov.Base = &buf[0]
		iov.SetLen(len(buf))
		msg.Iov = &iov
		msg.SetIovlen(1)
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
		nn, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
		switch e {
		case 0:
		case unix.EAGAIN, unix.EINTR:
			continue
		case unix.ECONNREFUSED:
			// An earlier reply met a closed port: the client is gone.
			return errors.New("client's port closed")
		default:
			return e
		}
		n := int(nn)
		h, ok := engine.ParsePacketHeader(buf[:n])
		if !ok || h.Type != engine.PacketRRRequest || h.Session != session || n < engine.PacketHeaderLen+bodyLen {
			continue
		}
		m := udpio.ParseCmsgs(oob[:msg.Controllen])
		buf[2] = engine.PacketRRResponse
		body(buf[engine.PacketHeaderLen:n]).stampReply(clk, m.KernelNs, m.TOS, m.TOSOK, u.delay)
		// One raw non-blocking send: a datagram is sent whole or not at
		// all, and a reply that finds the send buffer full is lost like
		// one dropped on the way (no Go system-call bookkeeping for a call
		// that never waits).
		if _, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(n),
			unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0); e != 0 {
			if e == unix.ECONNREFUSED {
				return errors.New("client's port closed")
			}
			continue // a reply lost here is a lost transaction for the client
		}
		u.served.Add(1)
		u.bySession.Add(1)
	}
	return nil
}
