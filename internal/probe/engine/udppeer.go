package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// A session's own UDP socket on the responder's port.
//
// The responder's shared UDP socket sits in Go's poller: every datagram
// that arrives on it, and every reply sent from it once the kernel frees
// the buffer, wakes the poller's thread, even though the reader itself
// waits in poll(2) on its own thread. For a request/response loop those
// two wake-ups per transaction are most of the responder's cost (perf:
// do_epoll_wait and sock_wfree's wake-up took a third of its time). So a
// session can have a socket of its own on the same port, connected to its
// client: the kernel delivers a datagram to the connected socket whose
// peer matches before it considers the unconnected one (UDP lookup scores
// a connected socket higher), so the client's datagrams reach it directly
// and nothing else does. The port stays the same, so firewalls, NAT and
// Kubernetes policies that allow the responder's port allow this too.
//
// This takes SO_REUSEPORT on the shared socket (the only way to bind a
// second socket to the port), and a reuseport program that sends every
// datagram that matches no connected socket to the shared socket: without
// it the kernel would spread other clients' datagrams over every
// unconnected socket of the group, which a session socket is for the
// moment between its bind and its connect. Only a process of the same user
// can join the group. Where the kernel refuses either option the responder
// does without, and sessions use the shared socket as before.

// shareUDPPort lets fd's port be shared with sessions' connected sockets.
// It is called before bind (SO_REUSEPORT must be set then).
func shareUDPPort(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return fmt.Errorf("SO_REUSEPORT: %w", err)
	}
	return nil
}

// steerToShared attaches, after bind, the reuseport program that picks the
// group's first socket (the shared one, which created the group) for every
// datagram no connected socket claims.
func steerToShared(uc *net.UDPConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_ATTACH_REUSEPORT_CBPF: %w", serr)
	}
	return nil
}

// ErrNoPeerSocket says that the responder cannot give sessions sockets of
// their own (its kernel refused SO_REUSEPORT or the reuseport program).
var ErrNoPeerSocket = errors.New("the responder's UDP port cannot be shared with session sockets")

// PeerSocket opens a UDP socket of the session's own on the responder's UDP
// port, connected to peer (the address the client's datagrams come from),
// with opts applied. It is a blocking descriptor outside Go's poller, for a
// loop on a locked thread; the caller closes it. Datagrams from peer then
// arrive on it instead of the shared socket (those already queued on the
// shared socket still go to the session's PacketFunc).
//
// Call it on a locked OS thread (runtime.LockOSThread) that is never
// unlocked, so that it ends with its goroutine: when the responder's socket
// is in another network namespace than the thread (a responder started
// inside a namespace by a process that lives outside it, as the tests and
// the lab do), the thread joins the socket's namespace to open the new one
// there.
func (s *Session) PeerSocket(peer netip.AddrPort, opts SockOpts) (int, error) {
	if !s.r.udpShared {
		return -1, ErrNoPeerSocket
	}
	if err := joinNetnsOf(s.r.udp); err != nil {
		return -1, fmt.Errorf("session UDP socket: %w", err)
	}
	la, ok := s.r.udp.LocalAddr().(*net.UDPAddr)
	if !ok {
		return -1, fmt.Errorf("responder's UDP address %v", s.r.udp.LocalAddr())
	}
	local := la.AddrPort()
	rc, err := s.r.udp.SyscallConn()
	if err != nil {
		return -1, err
	}
	family := unix.AF_INET
	if err := rc.Control(func(fd uintptr) {
		if d, gerr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); gerr == nil {
			family = d
		}
	}); err != nil {
		return -1, err
	}
	var lsa, psa unix.Sockaddr
	switch {
	case family == unix.AF_INET6:
		lsa = &unix.SockaddrInet6{Port: int(local.Port()), Addr: local.Addr().As16()}
		psa = &unix.SockaddrInet6{Port: int(peer.Port()), Addr: peer.Addr().As16()}
	case local.Addr().Unmap().Is4() && peer.Addr().Unmap().Is4():
		lsa = &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().Unmap().As4()}
		psa = &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().Unmap().As4()}
	default:
		return -1, fmt.Errorf("peer %s and responder %s are of different address families", peer, local)
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open session UDP socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("session UDP socket: %s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return fail("SO_REUSEPORT", err)
	}
	if err := opts.Apply(fd, family == unix.AF_INET6); err != nil {
		return fail("options", err)
	}
	if err := unix.Bind(fd, lsa); err != nil {
		return fail("bind "+local.String(), err)
	}
	if err := unix.Connect(fd, psa); err != nil {
		return fail("connect "+peer.String(), err)
	}
	// Replies leave from the address the kernel picked for the route to
	// peer; the client drops any that do not come from the address it
	// sent to (the control connection's, on this side of any NAT).
	if ca, ok := s.Ctrl.Conn().LocalAddr().(*net.TCPAddr); ok {
		got, gerr := sockAddr(fd)
		if gerr != nil {
			return fail("getsockname", gerr)
		}
		if want := ca.AddrPort().Addr().Unmap(); got.Unmap() != want {
			return fail("source", fmt.Errorf("replies would leave from %s, not %s where the client sends", got, want))
		}
	}
	return fd, nil
}

func sockAddr(fd int) (netip.Addr, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, err
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr), nil
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr), nil
	}
	return netip.Addr{}, fmt.Errorf("address family of %T", sa)
}

// joinNetnsOf moves the calling (locked) thread into the network namespace
// of c's socket, unless it is there already.
func joinNetnsOf(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	nsfd := -1
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		nsfd, ierr = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
	}); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("network namespace of the responder's socket (SIOCGSKNS): %w", ierr)
	}
	defer unix.Close(nsfd)
	var want, have unix.Stat_t
	if err := unix.Fstat(nsfd, &want); err != nil {
		return fmt.Errorf("stat the responder's network namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &have); err == nil && have.Ino == want.Ino && have.Dev == want.Dev {
		return nil
	}
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join the responder's network namespace: %w", err)
	}
	return nil
}

// PeerReceiver returns a batched receiver on a session's own socket fd
// (from PeerSocket), sized as the responder's shared reader is: its
// receive buffer and batch. Only its RecvInThread reads.
func (s *Session) PeerReceiver(fd int) (*udpio.Receiver, error) {
	if _, err := udpio.SetRecvBufferFd(fd, udpRecvBuffer); err != nil {
		s.Log.Debug("session socket's receive buffer", "err", err)
	}
	return udpio.NewReceiverFd(fd, udpReadBatch, udpReadSize, udpio.Options{})
}

// PeerLoop runs, once, a loop on a session's own UDP socket (PeerSocket)
// until Stop: rr's responder answers on one, the udp kind's receiver reads
// one. Open may be called for every datagram that reaches the shared
// socket; only the first call opens.
type PeerLoop struct {
	s    *Session
	opts SockOpts
	run  func(fd int, ended *atomic.Bool) error

	tried   atomic.Bool // the once-guard of start
	mu      sync.Mutex  // guards closed, openErr and wg's Add
	closed  bool
	openErr error
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewPeerLoop returns a loop that, once opened, runs run on the session's
// own socket with opts until ctx ends or Stop is called. run must return
// soon after ended turns true; its blocked reads end then, since the
// socket's receive side is shut down.
func NewPeerLoop(ctx context.Context, s *Session, opts SockOpts, run func(fd int, ended *atomic.Bool) error) *PeerLoop {
	l := &PeerLoop{s: s, opts: opts, run: run}
	l.ctx, l.cancel = context.WithCancel(ctx)
	return l
}

// Open starts the loop on a socket connected to peer, unless it was
// started (or stopped) before. The socket is opened on a locked thread of
// its own that ends with it (PeerSocket may move that thread into the
// responder's network namespace; the socket stays in that namespace
// whichever thread then uses it); run goes on on an ordinary goroutine,
// which may lock its thread itself.
func (l *PeerLoop) Open(peer netip.AddrPort) { l.start(peer, nil) }

// OpenWait is Open that returns once the socket is connected, or with the
// reason it could not be opened (ErrNoPeerSocket when the loop was
// started or stopped before).
func (l *PeerLoop) OpenWait(peer netip.AddrPort) error {
	ready := make(chan error, 1)
	if !l.start(peer, ready) {
		return ErrNoPeerSocket
	}
	return <-ready
}

// start starts the loop once; ready, when not nil, gets the open's error.
func (l *PeerLoop) start(peer netip.AddrPort, ready chan<- error) bool {
	if l.tried.Swap(true) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fd, err := l.open(peer)
		if ready != nil {
			ready <- err
		}
		if err != nil {
			l.s.Log.Debug("session socket: the shared socket goes on", "kind", l.s.Kind, "err", err)
			l.mu.Lock()
			l.openErr = err
			l.mu.Unlock()
			return
		}
		defer unix.Close(fd)
		var ended atomic.Bool
		defer context.AfterFunc(l.ctx, func() {
			ended.Store(true)
			_ = unix.Shutdown(fd, unix.SHUT_RD)
		})()
		if err := l.run(fd, &ended); err != nil {
			l.s.Log.Debug("session socket", "kind", l.s.Kind, "err", err)
		}
	}()
	return true
}

func (l *PeerLoop) open(peer netip.AddrPort) (int, error) {
	type opened struct {
		fd  int
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		fd, err := l.s.PeerSocket(peer, l.opts)
		ch <- opened{fd, err}
	}()
	o := <-ch
	return o.fd, o.err
}

// Stop ends the loop and waits for it.
func (l *PeerLoop) Stop() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
}

// OpenErr says why the session's socket could not be opened (nil when it
// was, or was not tried); call it after Stop.
func (l *PeerLoop) OpenErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.openErr
}
