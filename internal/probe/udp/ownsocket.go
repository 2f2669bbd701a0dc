package udp

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// The receiving responder's socket of the session's own.
//
// The responder's shared UDP socket is registered in Go's poller while its
// reader waits for datagrams in poll(2) on its own thread, so every
// datagram that reaches it wakes two threads: the reader and the poller's
// thread in epoll_wait, which finds no goroutine waiting. Over a veth both
// wake-ups are done in the sender's softirq and charged to the sender; at
// 10 Mbit/s they were most of what cnperf's sender spent beyond iperf3's
// (docs/probes.md, "UDP at 10M"). So, as for rr, a receiving test gets a
// socket of the session's own on the responder's port, connected to the
// client's data socket (engine.Session.PeerSocket), which a locked thread
// reads with blocking system calls outside Go's poller: one wake-up per
// datagram, as iperf3's server has.
//
// The client names its data socket's address in the start message, and
// the socket is connected before the responder answers it, so the test's
// datagrams all arrive on one socket and are accounted in the order they
// came. Where they come from another address (a NAT on the way), or the
// client names none (an older cnperf), or the responder cannot give the
// session a socket, the shared socket receives them all.

// ownPollWait bounds one wait for datagrams on the session's socket, so
// that its reader sees the test end.
const ownPollWait = 50 * time.Millisecond

// ownSocket reads a receiving test's datagrams from the session's own
// socket once opened.
type ownSocket struct {
	s       *engine.Session
	deliver func(pkt []byte, from netip.AddrPort, info engine.RxInfo)
	drops   func(uint32)
	counted *atomic.Int64 // datagrams read from the session's socket
	peer    *engine.PeerLoop
	mode    atomic.Value // string: how the session's socket is read
}

func newOwnSocket(ctx context.Context, s *engine.Session, deliver func([]byte, netip.AddrPort, engine.RxInfo), drops func(uint32), counted *atomic.Int64) *ownSocket {
	o := &ownSocket{s: s, deliver: deliver, drops: drops, counted: counted}
	o.peer = engine.NewPeerLoop(ctx, s, engine.SockOpts{RecvTOS: true, RecvTstamp: true}, o.read)
	return o
}

// open opens the session's socket, connected to from, and starts its
// reader; it returns once the socket is connected.
func (o *ownSocket) open(from netip.AddrPort) error { return o.peer.OpenWait(from) }

// stop ends the reader and waits for it.
func (o *ownSocket) stop() { o.peer.Stop() }

// recvMode says how the session's socket was read ("" when it was not).
func (o *ownSocket) recvMode() string {
	m, _ := o.mode.Load().(string)
	return m
}

// read reads the session's socket fd until ended, on a locked thread: it
// waits for datagrams in poll(2) there (udpio's RecvInThread).
func (o *ownSocket) read(fd int, ended *atomic.Bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rcv, err := o.s.PeerReceiver(fd)
	if err != nil {
		return err
	}
	o.mode.Store(rcv.Mode().RecvString())
	session := o.s.ID
	var drops uint32
	var dropsOK bool
	deliver := func(pkt []byte, from netip.AddrPort, m *udpio.Meta) {
		if h, ok := engine.ParsePacketHeader(pkt); !ok || h.Session != session {
			return
		}
		o.deliver(pkt, from, engine.RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs})
		drops, dropsOK = m.Drops, m.DropsOK || dropsOK
	}
	for !ended.Load() {
		n, err := rcv.RecvInThread(deliver, ownPollWait)
		if n > 0 {
			o.counted.Add(int64(n))
			if dropsOK {
				o.drops(drops)
			}
		}
		if err != nil && !ended.Load() {
			if errors.Is(err, unix.ECONNREFUSED) {
				continue // an ICMP error for an earlier result datagram
			}
			return err
		}
	}
	return nil
}
