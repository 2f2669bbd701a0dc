package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Receive-path sizing of the shared UDP socket and of sessions' own
// sockets (PeerReceiver).
const (
	// udpReadBatch is how many datagrams (or GRO super-packets of up to
	// 64 KiB) one recvmmsg call takes.
	udpReadBatch = 32
	// udpRecvBuffer is the receive buffer asked for (SO_RCVBUFFORCE as
	// root, else SO_RCVBUF up to net.core.rmem_max).
	udpRecvBuffer = 32 << 20
	// udpReadSize is one batch entry's buffer: a GRO super-packet.
	udpReadSize = 1 << 16
	// udpIdleAfter is how long the reader waits in poll(2) on its own
	// thread after the last datagram; past it, it waits on Go's poller.
	udpIdleAfter = 10 * time.Millisecond
)

// readUDP is the responder's UDP reader: it reads in batches (recvmmsg, and
// UDP GRO where the kernel has it), splits merged datagrams back into the
// ones that were sent, and demultiplexes each to its session's PacketFunc by
// the session id in the packet header. It has its OS thread to itself and,
// while datagrams come, waits for the next in poll(2) there (udpio's
// RecvInThread): an rr request is then answered without a wake-up through
// Go's poller.
//
// Idle (udpIdleAfter without a datagram) it waits on Go's poller instead.
// A goroutine blocked in a system call keeps its P (Go's scheduler slot)
// until the runtime's monitor takes it back, and the monitor takes it
// back only when no P is idle; it then wakes a thread to hand the P to,
// and polls every 20 µs for the next millisecond. With the UDP reader
// parked in poll(2) and an rr TCP loop blocked in its read, a responder
// with GOMAXPROCS 2 has no idle P, and that happened every poll timeout:
// hundreds of monitor wake-ups a second, each one taking the CPU from the
// loops it shares a CPU with (docs/probes.md, "rr's loops").
func (r *Responder) readUDP(ctx context.Context) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := udpio.SetRecvBuffer(r.udp, udpRecvBuffer); err != nil {
		r.log.Info("udp receive buffer", "err", err)
	}
	rcv, err := udpio.NewReceiver(r.udp, udpReadBatch, udpReadSize, udpio.Options{})
	if err != nil {
		r.log.Warn("batched udp reads unavailable; reading one datagram per call", "err", err)
		rcv, err = udpio.NewReceiver(r.udp, 1, 1<<16, udpio.Options{NoBatch: true})
		if err != nil {
			r.log.Error("udp reader", "err", err)
			return
		}
	}
	for _, n := range rcv.Notes() {
		r.log.Info(n)
	}
	r.udpReadMode.Store(rcv.Mode().RecvString())
	// The session of the previous datagram, looked up once per batch run.
	var (
		lastID SessionID
		lastFn PacketFunc
	)
	deliver := func(pkt []byte, from netip.AddrPort, m *udpio.Meta) {
		h, ok := ParsePacketHeader(pkt)
		if !ok {
			rx := RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs}
			if r.unclaimed != nil && !r.foreignClaims(pkt, from) {
				r.unclaimed(pkt, from, rx, func(b []byte, tos int) error { return r.sendUnclaimed(b, tos, from) })
				return
			}
			if r.foreign != nil {
				r.foreign.Packet(pkt, from, rx)
			}
			return
		}
		if lastFn == nil || h.Session != lastID {
			v, ok := r.packetFns.Load(h.Session)
			if !ok {
				return
			}
			lastID, lastFn = h.Session, v.(PacketFunc)
		}
		lastFn(pkt, from, RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs, Drops: m.Drops, DropsOK: m.DropsOK})
	}
	// Idle, the reader waits on Go's poller without a deadline (a
	// deadline to look at ctx woke the agent 20 times a second); the end
	// of ctx sets one in the past.
	stop := context.AfterFunc(ctx, func() { _ = r.udp.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	lastRx := time.Now()
	for ctx.Err() == nil {
		lastFn = nil // a session may have ended since the last batch
		var n int
		var err error
		if idle := time.Since(lastRx); idle < udpIdleAfter {
			n, err = rcv.RecvInThread(deliver, udpIdleAfter-idle)
		} else {
			if err := r.udp.SetReadDeadline(time.Time{}); err != nil || ctx.Err() != nil {
				return // closed, or ctx ended before the deadline was cleared
			}
			if n, err = rcv.Recv(deliver); errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
			}
		}
		if n > 0 {
			lastRx = time.Now()
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Debug("udp read", "err", err)
		}
	}
}

// HandleUnclaimed routes to fn the datagrams that carry no cnperf header
// and that the Foreign handler (iperf3's) does not claim. Call it before
// Serve.
func (r *Responder) HandleUnclaimed(fn UnclaimedFunc) { r.unclaimed = fn }

// foreignClaims asks the Foreign handler whether a datagram is its own; a
// handler that cannot say claims nothing.
func (r *Responder) foreignClaims(pkt []byte, from netip.AddrPort) bool {
	c, ok := r.foreign.(PacketClaimer)
	return ok && c.ClaimsPacket(pkt, from)
}

// sendUnclaimed sends b to to from the shared UDP socket with the TOS byte
// tos, without blocking (MSG_DONTWAIT): a full send buffer drops the
// datagram instead of stalling the reader, and no deadline is set on the
// shared socket that other sessions write on.
func (r *Responder) sendUnclaimed(b []byte, tos int, to netip.AddrPort) error {
	rc, err := r.udp.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			serr = err
			return
		}
		var sa unix.Sockaddr
		switch {
		case domain == unix.AF_INET && to.Addr().Unmap().Is4():
			sa = &unix.SockaddrInet4{Addr: to.Addr().Unmap().As4(), Port: int(to.Port())}
		case domain == unix.AF_INET6:
			sa = &unix.SockaddrInet6{Addr: to.Addr().As16(), Port: int(to.Port())}
		default:
			serr = errors.New("reply address family differs from the socket's")
			return
		}
		// IP_TOS for IPv4, or v4-mapped on a v6 socket; IPV6_TCLASS else.
		oob := udpio.TOSCmsg(tos, !to.Addr().Unmap().Is4())
		serr = unix.Sendmsg(int(fd), b, oob, sa, unix.MSG_DONTWAIT)
	}); err != nil {
		return err
	}
	return serr
}
