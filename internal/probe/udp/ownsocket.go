package udp

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
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
// (docs/probes.md, "UDP at 10M"). So, as for rr, the first datagram of a
// test opens a socket of the session's own on the responder's port,
// connected to the client (probe.Session.PeerSocket), and a locked thread
// reads it with blocking system calls outside Go's poller: one wake-up per
// datagram, as iperf3's server has.
const (
	// ownPollWait bounds one wait for datagrams on the session's socket,
	// so that its reader sees the test end.
	ownPollWait = 50 * time.Millisecond
	// sharedQuiet is how long the datagrams that came to the shared
	// socket before the session's socket was connected must have stopped
	// before the session's socket is read: the two readers then never
	// deliver at once, and their datagrams reach the accounting in the
	// order they arrived (no reordering made by the switch).
	sharedQuiet = 2 * time.Millisecond
	// sharedQuietMax bounds that wait.
	sharedQuietMax = time.Second
)

// ownSocket reads a receiving test's datagrams from the session's own
// socket once open is called; until then, and where the responder cannot
// give the session a socket, the shared socket's reader delivers them.
type ownSocket struct {
	s       *probe.Session
	deliver func(pkt []byte, from netip.AddrPort, info probe.RxInfo)
	drops   func(uint32)
	counted *atomic.Int64 // datagrams read from the session's socket
	// lastShared is when the shared socket last delivered a datagram of
	// the session (monotonic ns since start).
	lastShared atomic.Int64
	start      time.Time

	tried   atomic.Bool // open was called
	mu      sync.Mutex  // guards opened, closed, openErr, mode and wg's Add
	opened  bool
	closed  bool
	openErr error
	mode    string
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newOwnSocket(ctx context.Context, s *probe.Session, deliver func([]byte, netip.AddrPort, probe.RxInfo), drops func(uint32), counted *atomic.Int64) *ownSocket {
	o := &ownSocket{s: s, deliver: deliver, drops: drops, counted: counted, start: time.Now()}
	o.ctx, o.cancel = context.WithCancel(ctx)
	return o
}

// sharedDelivered notes a datagram delivered by the shared socket's reader.
func (o *ownSocket) sharedDelivered() {
	o.lastShared.Store(int64(time.Since(o.start)))
}

// open starts, once, the reader of the session's own socket, connected to
// from.
func (o *ownSocket) open(from netip.AddrPort) {
	if o.tried.Swap(true) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.opened || o.closed {
		return
	}
	o.opened = true
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		// PeerSocket may move the thread into the responder's network
		// namespace: the thread stays locked and ends with this goroutine.
		runtime.LockOSThread()
		if err := o.read(from); err != nil {
			o.s.Log.Debug("udp: the session's own socket", "err", err)
			o.mu.Lock()
			o.openErr = err
			o.mu.Unlock()
		}
	}()
}

// stop ends the reader and waits for it.
func (o *ownSocket) stop() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}

// recvMode says how the session's socket was read ("" when it was not).
func (o *ownSocket) recvMode() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mode
}

// read opens the session's socket and reads it until stop.
func (o *ownSocket) read(from netip.AddrPort) error {
	fd, err := o.s.PeerSocket(from, probe.SockOpts{RecvTOS: true, RecvTstamp: true})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// A blocked poll ends when stop shuts the socket's receive side.
	var ended atomic.Bool
	defer context.AfterFunc(o.ctx, func() {
		ended.Store(true)
		_ = unix.Shutdown(fd, unix.SHUT_RD)
	})()
	if _, err := udpio.SetRecvBufferFd(fd, udpRecvBuffer); err != nil {
		o.s.Log.Debug("udp: the session socket's receive buffer", "err", err)
	}
	rcv, err := udpio.NewReceiverFd(fd, udpReadBatch, 1<<16, udpio.Options{})
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.mode = rcv.Mode().RecvString()
	o.mu.Unlock()
	// Let the shared reader finish what reached the shared socket before
	// the connect.
	for deadline := time.Now().Add(sharedQuietMax); time.Now().Before(deadline) && !ended.Load(); {
		if quiet := time.Since(o.start) - time.Duration(o.lastShared.Load()); quiet >= sharedQuiet {
			break
		}
		time.Sleep(sharedQuiet / 4)
	}
	session := o.s.ID
	var drops uint32
	var dropsOK bool
	deliver := func(pkt []byte, from netip.AddrPort, m *udpio.Meta) {
		if h, ok := probe.ParsePacketHeader(pkt); !ok || h.Session != session {
			return
		}
		o.deliver(pkt, from, probe.RxInfo{TOS: m.TOS, TOSOK: m.TOSOK, KernelNs: m.KernelNs})
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

// Receive-path sizing of the session's socket, as the responder's shared
// socket has it.
const (
	udpReadBatch  = 32
	udpRecvBuffer = 32 << 20
)
