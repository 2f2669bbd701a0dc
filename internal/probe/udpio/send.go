package udpio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of sendmmsg(2) and recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// maxMsgs bounds the entries of one sendmmsg or recvmmsg call.
const maxMsgs = 64

// oobPerSend holds a UDP_SEGMENT and a TOS control message.
const oobPerSend = 64

// Sender writes runs of equal-sized datagrams to one destination.
type Sender struct {
	conn   *net.UDPConn
	rc     syscall.RawConn
	family int
	mode   Mode

	// Destination for an unconnected socket; nameLen 0 means connected.
	name    [unix.SizeofSockaddrInet6]byte
	nameLen int
	to      netip.AddrPort

	tos      int // TOS put on each datagram by control message; -1 for none
	tosV6    bool
	msgs     []mmsghdr
	iovs     []unix.Iovec
	oob      []byte
	notes    []string
	plainOOB []byte
	maxBurst int // most datagrams handed to the kernel by one call
	// sendFlags are sendmmsg's flags: MSG_DONTWAIT on a socket in Go's
	// poller (which waits for room), none on a blocking descriptor.
	sendFlags uintptr
	// The sendmmsg call handed to rc.Write, made once in the constructors
	// (a closure made per call escapes through the RawConn interface: two
	// allocations per send), with its argument and results.
	writeMmsg func(fd uintptr) bool
	wEntries  int
	wSent     int
	wErr      error
}

// NewSender returns a sender on conn. to is the destination for an
// unconnected socket, or the zero AddrPort when conn is connected. tos >= 0
// puts that TOS byte on every datagram by control message (for a shared
// socket whose own TOS cannot be changed); -1 leaves the socket's.
func NewSender(conn *net.UDPConn, to netip.AddrPort, tos int, opt Options) (*Sender, error) {
	rc, family, err := rawConn(conn)
	if err != nil {
		return nil, err
	}
	s := &Sender{conn: conn, rc: rc, family: family, to: to, tos: tos, sendFlags: unix.MSG_DONTWAIT,
		msgs: make([]mmsghdr, maxMsgs), iovs: make([]unix.Iovec, maxMsgs), oob: make([]byte, maxMsgs*oobPerSend)}
	if to.IsValid() {
		if s.nameLen, err = putSockaddr(&s.name, family, to); err != nil {
			return nil, err
		}
		// A v4 (or v4-mapped) destination takes IP_TOS; a v6 one IPV6_TCLASS.
		s.tosV6 = !to.Addr().Unmap().Is4()
	} else if ra, ok := conn.RemoteAddr().(*net.UDPAddr); ok {
		s.tosV6 = ra.IP.To4() == nil
	}
	s.writeMmsg = s.sendmmsg
	s.pickMode(opt)
	return s, nil
}

// NewSenderFd returns a sender on fd, a connected UDP socket in blocking
// mode that is not in Go's poller (see engine.DetachFd): each send then is
// one blocking system call on the caller's thread, bounded by the socket's
// SO_SNDTIMEO, and no poller thread wakes when the kernel frees the sent
// buffers (on a veth that wake-up costs more CPU than the send). Close fd
// after use; the sender does not.
func NewSenderFd(fd int, opt Options) (*Sender, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("udp socket getsockname: %w", err)
	}
	family := unix.AF_INET
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	s := &Sender{rc: fdConn(fd), family: family, tos: -1,
		msgs: make([]mmsghdr, maxMsgs), iovs: make([]unix.Iovec, maxMsgs), oob: make([]byte, maxMsgs*oobPerSend)}
	s.writeMmsg = s.sendmmsg
	s.pickMode(opt)
	return s, nil
}

// fdConn is a syscall.RawConn over a blocking descriptor outside Go's
// poller: Read and Write call f once; f returning false (EAGAIN: the
// socket's timeout passed) is a deadline error.
type fdConn int

func (c fdConn) Control(f func(uintptr)) error { f(uintptr(c)); return nil }

func (c fdConn) Read(f func(uintptr) bool) error {
	if !f(uintptr(c)) {
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (c fdConn) Write(f func(uintptr) bool) error {
	if !f(uintptr(c)) {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// pickMode chooses the fastest mode opt allows and the kernel has.
func (s *Sender) pickMode(opt Options) {
	rc := s.rc
	switch {
	case opt.NoBatch:
		s.mode = ModePlain
	case opt.NoOffload:
		s.mode = ModeMmsg
	default:
		s.mode = ModeGSO
		var gerr error
		_ = rc.Control(func(fd uintptr) {
			// Reading UDP_SEGMENT fails on kernels that do not know it.
			_, gerr = unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
		})
		if gerr != nil {
			s.mode = ModeMmsg
			s.notes = append(s.notes, fmt.Sprintf("sender: no UDP GSO (%v); one datagram per mmsg entry", gerr))
		}
	}
}

// Mode returns how the sender currently writes (it may degrade on the way).
func (s *Sender) Mode() Mode { return s.mode }

// MaxBurst returns the most datagrams one system call has handed to the
// kernel so far.
func (s *Sender) MaxBurst() int { return s.maxBurst }

// Notes say which fallbacks were taken and why.
func (s *Sender) Notes() []string { return append([]string(nil), s.notes...) }

// Send writes count datagrams of size bytes each, laid back to back in buf,
// and returns how many went out. It blocks while the socket's send buffer
// is full, bounded by the connection's write deadline.
func (s *Sender) Send(buf []byte, size, count int) (int, error) {
	if size <= 0 || count < 0 || size*count > len(buf) {
		return 0, fmt.Errorf("udpio send: %d datagrams of %d bytes do not fit a %d-byte buffer", count, size, len(buf))
	}
	sent := 0
	for sent < count {
		var n int
		var err error
		switch s.mode {
		case ModeGSO:
			n, err = s.sendMmsg(buf[sent*size:], size, count-sent, SegmentsPerSend(size))
			if err != nil && n == 0 && isOffloadRefusal(err) {
				s.mode = ModeMmsg
				s.notes = append(s.notes, fmt.Sprintf("sender: the kernel refused UDP GSO (%v); fell back to one datagram per mmsg entry", err))
				continue
			}
		case ModeMmsg:
			n, err = s.sendMmsg(buf[sent*size:], size, count-sent, 1)
			if err != nil && n == 0 && isNoBatch(err) {
				s.mode = ModePlain
				s.notes = append(s.notes, fmt.Sprintf("sender: no sendmmsg (%v); fell back to one datagram per system call", err))
				continue
			}
		default:
			n, err = s.sendPlain(buf[sent*size : (sent+1)*size])
		}
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// sendMmsg writes up to count datagrams with one sendmmsg call, segs
// datagrams per entry (segs > 1 uses UDP_SEGMENT).
func (s *Sender) sendMmsg(buf []byte, size, count, segs int) (int, error) {
	entries := 0
	queued := 0
	for queued < count && entries < maxMsgs {
		k := min(segs, count-queued)
		m := &s.msgs[entries]
		m.hdr = unix.Msghdr{}
		iov := &s.iovs[entries]
		iov.Base = &buf[queued*size]
		iov.SetLen(k * size)
		m.hdr.Iov = iov
		m.hdr.Iovlen = 1
		if s.nameLen > 0 {
			m.hdr.Name = &s.name[0]
			m.hdr.Namelen = uint32(s.nameLen)
		}
		oob := s.oob[entries*oobPerSend : (entries+1)*oobPerSend]
		ol := 0
		if segs > 1 {
			ol += putUint16Cmsg(oob[ol:], unix.SOL_UDP, unix.UDP_SEGMENT, uint16(size))
		}
		ol += s.putTOS(oob[ol:])
		if ol > 0 {
			m.hdr.Control = &oob[0]
			m.hdr.SetControllen(ol)
		}
		entries++
		queued += k
	}
	s.wEntries, s.wSent, s.wErr = entries, 0, nil
	err := s.rc.Write(s.writeMmsg)
	nmsg := s.wSent
	if err == nil {
		err = s.wErr
	}
	// Count the datagrams of the entries that went out.
	n := 0
	for i := 0; i < nmsg; i++ {
		n += int(s.iovs[i].Len) / size
	}
	s.maxBurst = max(s.maxBurst, n)
	if err != nil {
		return n, fmt.Errorf("sendmmsg: %w", err)
	}
	return n, nil
}

// sendmmsg is one sendmmsg call of the first wEntries entries, for
// rc.Write: false when the socket has no room (EAGAIN).
func (s *Sender) sendmmsg(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(s.wEntries), s.sendFlags, 0, 0)
	if e == unix.EAGAIN {
		return false
	}
	if e != 0 {
		s.wErr = e
		return true
	}
	s.wSent = int(r)
	return true
}

func (s *Sender) putTOS(b []byte) int {
	if s.tos < 0 {
		return 0
	}
	if s.tosV6 && s.family == unix.AF_INET6 {
		return putIntCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int32(s.tos))
	}
	return putIntCmsg(b, unix.IPPROTO_IP, unix.IP_TOS, int32(s.tos))
}

func (s *Sender) sendPlain(d []byte) (int, error) {
	var err error
	if s.conn == nil { // a blocking descriptor
		var oob []byte
		if s.tos >= 0 {
			if s.plainOOB == nil {
				s.plainOOB = make([]byte, oobPerSend)
			}
			oob = s.plainOOB[:s.putTOS(s.plainOOB)]
		}
		werr := s.rc.Write(func(fd uintptr) bool {
			err = unix.Sendmsg(int(fd), d, oob, nil, 0)
			return err != unix.EAGAIN
		})
		if werr != nil {
			err = werr
		}
		if err != nil {
			return 0, fmt.Errorf("send: %w", err)
		}
		s.maxBurst = max(s.maxBurst, 1)
		return 1, nil
	}
	if s.tos >= 0 {
		if s.plainOOB == nil {
			s.plainOOB = make([]byte, oobPerSend)
		}
		ol := s.putTOS(s.plainOOB)
		if s.nameLen > 0 {
			_, _, err = s.conn.WriteMsgUDPAddrPort(d, s.plainOOB[:ol], s.to)
		} else {
			_, _, err = s.conn.WriteMsgUDP(d, s.plainOOB[:ol], nil)
		}
	} else if s.nameLen > 0 {
		_, err = s.conn.WriteToUDPAddrPort(d, s.to)
	} else {
		_, err = s.conn.Write(d)
	}
	if err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	s.maxBurst = max(s.maxBurst, 1)
	return 1, nil
}

// IsRefused reports whether err says the far end's port is closed (an ICMP
// port unreachable came back on a connected socket).
func IsRefused(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED)
}
