package udpio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oobPerRecv holds the control messages of one received datagram: TOS or
// traffic class (both on a dual-stack socket), timestamp, GRO segment size,
// drop counter.
const oobPerRecv = 256

// Receiver reads datagrams in batches. It is not safe for concurrent use.
type Receiver struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	mode Mode

	bufs  [][]byte
	oobs  []byte
	names []byte
	msgs  []mmsghdr
	iovs  []unix.Iovec
	pfd   [1]unix.PollFd // RecvInThread's, kept here so that polling allocates nothing

	// The calls handed to rc (readBatch, for Read and for Control), made
	// once in newReceiver: a closure made per call escapes through the
	// RawConn interface and allocates. Their argument and results:
	readFn    func(fd uintptr) bool
	controlFn func(fd uintptr)
	cN        int
	cWait     time.Duration
	cPoll     bool // poll up to cWait when nothing is queued
	cGot      int
	cAgain    bool
	cErr      error
	// meta is the datagram's Meta handed to the caller's function
	// (reused: the function must not keep it).
	meta Meta

	notes []string
}

// NewReceiver prepares batched reads on conn: up to batch datagrams (or GRO
// super-packets) per call, each at most bufSize bytes (use 65535 with GRO).
// It turns on UDP_GRO unless opt says not to, and the socket's drop counter
// (SO_RXQ_OVFL); TOS and timestamp reports are the caller's to enable.
func NewReceiver(conn *net.UDPConn, batch, bufSize int, opt Options) (*Receiver, error) {
	rc, _, err := rawConn(conn)
	if err != nil {
		return nil, err
	}
	return newReceiver(conn, rc, batch, bufSize, opt), nil
}

func newReceiver(conn *net.UDPConn, rc syscall.RawConn, batch, bufSize int, opt Options) *Receiver {
	if batch < 1 || batch > maxMsgs {
		batch = maxMsgs
	}
	r := &Receiver{conn: conn, rc: rc}
	switch {
	case opt.NoBatch:
		r.mode, batch = ModePlain, 1
	case opt.NoOffload:
		r.mode = ModeMmsg
	default:
		r.mode = ModeGSO
	}
	var groErr error
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		if r.mode == ModeGSO {
			groErr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 0)
		}
	})
	if groErr != nil {
		r.mode = ModeMmsg
		r.notes = append(r.notes, fmt.Sprintf("receiver: the kernel refused UDP_GRO (%v); one datagram per mmsg entry", groErr))
	}
	r.bufs = make([][]byte, batch)
	for i := range r.bufs {
		r.bufs[i] = make([]byte, bufSize)
	}
	r.oobs = make([]byte, batch*oobPerRecv)
	r.names = make([]byte, batch*unix.SizeofSockaddrInet6)
	r.msgs = make([]mmsghdr, batch)
	r.iovs = make([]unix.Iovec, batch)
	r.readFn = r.readBatch
	r.controlFn = func(fd uintptr) { r.readBatch(fd) }
	return r
}

// readBatch is one recvmmsg of up to cN datagrams without waiting, then,
// with cPoll and nothing queued, one poll(2) of up to cWait on this
// thread; false when nothing was queued.
func (r *Receiver) readBatch(fd uintptr) bool {
	r.cGot, r.cAgain, r.cErr = r.recvmmsg(fd, r.cN)
	if r.cAgain && r.cPoll {
		r.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		_, _ = unix.Poll(r.pfd[:], max(1, int(r.cWait.Milliseconds())))
	}
	return !r.cAgain
}

// NewReceiverFd is NewReceiver for a blocking descriptor outside Go's poller
// (a session's own socket, read on a locked thread): only RecvInThread
// reads it, and it reads in batches (opt.NoBatch is refused). Close fd
// after use; the receiver does not.
func NewReceiverFd(fd int, batch, bufSize int, opt Options) (*Receiver, error) {
	if opt.NoBatch {
		return nil, errors.New("udpio: a descriptor receiver reads in batches (recvmmsg)")
	}
	return newReceiver(nil, fdConn(fd), batch, bufSize, opt), nil
}

// Mode returns how the receiver reads.
func (r *Receiver) Mode() Mode { return r.mode }

// Notes say which fallbacks were taken and why.
func (r *Receiver) Notes() []string { return append([]string(nil), r.notes...) }

// Recv waits for at least one datagram (bounded by the connection's read
// deadline), reads what is queued up to the batch size, and calls fn for
// every datagram, GRO super-packets split back into their segments. fn must
// not keep pkt or m. It returns the number of datagrams delivered.
func (r *Receiver) Recv(fn func(pkt []byte, from netip.AddrPort, m *Meta)) (int, error) {
	if r.mode == ModePlain {
		return r.recvPlain(fn)
	}
	r.cN, r.cPoll = r.prepare(), false
	err := r.rc.Read(r.readFn)
	return r.finish(fn, r.cGot, err, r.cErr)
}

// RecvInThread is Recv for a reader that has its OS thread to itself
// (runtime.LockOSThread): when nothing is queued it waits in poll(2) on
// this thread instead of parking the goroutine on Go's poller, which saves
// the poller's wake-up and the hand-off to another thread on every
// arrival: microseconds that a request/response round trip shows. It
// ignores read deadlines and returns (0, nil) when nothing came within
// wait, so that the caller can check its context. A closed connection
// returns net.ErrClosed.
func (r *Receiver) RecvInThread(fn func(pkt []byte, from netip.AddrPort, m *Meta), wait time.Duration) (int, error) {
	if r.mode == ModePlain {
		_ = r.conn.SetReadDeadline(time.Now().Add(wait))
		n, err := r.recvPlain(fn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return n, err
	}
	r.cN, r.cWait = r.prepare(), wait
	for attempt := 0; attempt < 2; attempt++ {
		r.cPoll = attempt == 0
		err := r.rc.Control(r.controlFn)
		if err != nil {
			return 0, fmt.Errorf("recvmmsg: %w", err)
		}
		if !r.cAgain {
			break
		}
	}
	if r.cAgain {
		return 0, nil
	}
	return r.finish(fn, r.cGot, nil, r.cErr)
}

// prepare resets the batch's headers and returns its length.
func (r *Receiver) prepare() int {
	n := len(r.msgs)
	for i := 0; i < n; i++ {
		m := &r.msgs[i]
		m.hdr = unix.Msghdr{}
		m.len = 0
		iov := &r.iovs[i]
		iov.Base = &r.bufs[i][0]
		iov.SetLen(len(r.bufs[i]))
		m.hdr.Iov = iov
		m.hdr.Iovlen = 1
		m.hdr.Name = &r.names[i*unix.SizeofSockaddrInet6]
		m.hdr.Namelen = unix.SizeofSockaddrInet6
		m.hdr.Control = &r.oobs[i*oobPerRecv]
		m.hdr.SetControllen(oobPerRecv)
	}
	return n
}

// recvmmsg reads up to n datagrams without waiting; again is true when
// nothing was queued.
func (r *Receiver) recvmmsg(fd uintptr, n int) (got int, again bool, err error) {
	res, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	switch {
	case e == unix.EAGAIN:
		return 0, true, nil
	case e == unix.EINTR:
		return 0, true, nil
	case e != 0:
		return 0, false, e
	}
	return int(res), false, nil
}

// finish delivers the got datagrams of a batch, or reports its error.
func (r *Receiver) finish(fn func([]byte, netip.AddrPort, *Meta), got int, err, serr error) (int, error) {
	if err == nil && serr != nil {
		if isNoBatch(serr) && r.conn != nil {
			r.mode = ModePlain
			r.notes = append(r.notes, fmt.Sprintf("receiver: no recvmmsg (%v); one datagram per system call", serr))
			return r.recvPlain(fn)
		}
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("recvmmsg: %w", err)
	}
	delivered := 0
	for i := 0; i < got; i++ {
		m := &r.msgs[i]
		r.meta = ParseCmsgs(r.oobs[i*oobPerRecv : i*oobPerRecv+int(m.hdr.Controllen)])
		from := parseSockaddr(r.names[i*unix.SizeofSockaddrInet6 : i*unix.SizeofSockaddrInet6+int(m.hdr.Namelen)])
		delivered += split(r.bufs[i][:m.len], from, &r.meta, fn)
	}
	return delivered, nil
}

// split calls fn for each segment of a (possibly GRO-merged) datagram.
func split(b []byte, from netip.AddrPort, meta *Meta, fn func([]byte, netip.AddrPort, *Meta)) int {
	seg := meta.SegSize
	if seg <= 0 || seg >= len(b) {
		fn(b, from, meta)
		return 1
	}
	n := 0
	for off := 0; off < len(b); off += seg {
		end := min(off+seg, len(b))
		fn(b[off:end], from, meta)
		n++
	}
	return n
}

func (r *Receiver) recvPlain(fn func([]byte, netip.AddrPort, *Meta)) (int, error) {
	buf := r.bufs[0]
	oob := r.oobs[:oobPerRecv]
	n, oobn, _, from, err := r.conn.ReadMsgUDPAddrPort(buf, oob)
	if err != nil {
		return 0, fmt.Errorf("recvmsg: %w", err)
	}
	r.meta = ParseCmsgs(oob[:oobn])
	return split(buf[:n], from, &r.meta, fn), nil
}
