package udpio

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
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
	return r, nil
}

// Mode returns how the receiver reads.
func (r *Receiver) Mode() Mode { return r.mode }

// Notes say which fallbacks were taken and why.
func (r *Receiver) Notes() []string { return append([]string(nil), r.notes...) }

// Recv waits for at least one datagram (bounded by the connection's read
// deadline), reads what is queued up to the batch size, and calls fn for
// every datagram, GRO super-packets split back into their segments. fn must
// not keep pkt. It returns the number of datagrams delivered.
func (r *Receiver) Recv(fn func(pkt []byte, from netip.AddrPort, m *Meta)) (int, error) {
	if r.mode == ModePlain {
		return r.recvPlain(fn)
	}
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
	var got int
	var serr error
	err := r.rc.Read(func(fd uintptr) bool {
		res, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		if e != 0 {
			serr = e
			return true
		}
		got = int(res)
		return true
	})
	if err == nil && serr != nil {
		if isNoBatch(serr) {
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
		meta := ParseCmsgs(r.oobs[i*oobPerRecv : i*oobPerRecv+int(m.hdr.Controllen)])
		from := parseSockaddr(r.names[i*unix.SizeofSockaddrInet6 : i*unix.SizeofSockaddrInet6+int(m.hdr.Namelen)])
		delivered += split(r.bufs[i][:m.len], from, &meta, fn)
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
	meta := ParseCmsgs(oob[:oobn])
	return split(buf[:n], from, &meta, fn), nil
}
