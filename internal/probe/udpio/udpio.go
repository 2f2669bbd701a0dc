// Package udpio moves UDP datagrams in batches: a Writer that sends many
// equal-sized datagrams per system call with UDP GSO (one sendmsg carrying a
// UDP_SEGMENT size) or, where the kernel lacks it, sendmmsg; and a Reader
// that receives many per call with recvmmsg and, where the kernel has it,
// UDP GRO (one buffer holding several coalesced datagrams, split again
// here). Both fall back cleanly: Writer.GSO and Reader.GRO say what is in
// use. It depends only on the kernel interface, not on cnperf's packages.
package udpio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxGSOBytes bounds one GSO send: a UDP datagram's payload limit.
const MaxGSOBytes = 65000

// MaxGSOSegments is the kernel's UDP_MAX_SEGMENTS on older kernels (newer
// ones allow 128); staying at 64 works everywhere.
const MaxGSOSegments = 64

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Writer sends datagrams on a connected UDP socket.
type Writer struct {
	raw syscall.RawConn
	// GSO is true while UDP segmentation offload is in use.
	GSO  bool
	oob  []byte
	hdrs []mmsghdr
	iovs []unix.Iovec
}

// NewWriter returns a writer for c, which must be connected. It tries UDP
// GSO first and turns it off at the first sign the kernel or route refuses
// it.
func NewWriter(c *net.UDPConn) (*Writer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp writer: %w", err)
	}
	w := &Writer{raw: raw, GSO: true}
	w.oob = make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&w.oob[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	return w, nil
}

// Write sends n datagrams of segSize bytes each, stored back to back in
// buf[:n*segSize]. It returns how many went out; on EAGAIN it waits for the
// socket to become writable (honouring the connection's write deadline).
func (w *Writer) Write(buf []byte, segSize, n int) (int, error) {
	if segSize <= 0 || n <= 0 || len(buf) < n*segSize {
		return 0, errors.New("udp writer: bad batch")
	}
	sent := 0
	for sent < n {
		var k int
		var err error
		if w.GSO && n-sent > 1 {
			k, err = w.writeGSO(buf[sent*segSize:], segSize, n-sent)
			if err != nil && gsoRefused(err) {
				w.GSO = false
				continue
			}
		} else {
			k, err = w.writeMmsg(buf[sent*segSize:], segSize, n-sent)
		}
		sent += k
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

func gsoRefused(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOPROTOOPT) ||
		errors.Is(err, unix.EOPNOTSUPP)
}

// writeGSO sends up to MaxGSOSegments segments in one sendmsg.
func (w *Writer) writeGSO(buf []byte, segSize, n int) (int, error) {
	k := n
	if k > MaxGSOSegments {
		k = MaxGSOSegments
	}
	if k*segSize > MaxGSOBytes {
		k = MaxGSOBytes / segSize
	}
	if k < 2 {
		return w.writeMmsg(buf, segSize, n)
	}
	*(*uint16)(unsafe.Pointer(&w.oob[unix.CmsgLen(0)])) = uint16(segSize)
	var serr error
	err := w.raw.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgN(int(fd), buf[:k*segSize], w.oob, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	return k, nil
}

// writeMmsg sends up to 64 datagrams with one sendmmsg.
func (w *Writer) writeMmsg(buf []byte, segSize, n int) (int, error) {
	if n > 64 {
		n = 64
	}
	if len(w.hdrs) < n {
		w.hdrs = make([]mmsghdr, 64)
		w.iovs = make([]unix.Iovec, 64)
	}
	for i := 0; i < n; i++ {
		w.iovs[i].Base = &buf[i*segSize]
		w.iovs[i].SetLen(segSize)
		w.hdrs[i] = mmsghdr{}
		w.hdrs[i].hdr.Iov = &w.iovs[i]
		w.hdrs[i].hdr.SetIovlen(1)
	}
	var got int
	var serr error
	err := w.raw.Write(func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[0])), uintptr(n), 0, 0, 0)
		if e != 0 {
			serr = e
			return e != unix.EAGAIN
		}
		got, serr = int(r), nil
		return true
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return got, fmt.Errorf("sendmmsg: %w", err)
	}
	return got, nil
}

// Meta is what came with one received datagram.
type Meta struct {
	From netip.AddrPort
	// OOB holds the control messages of the datagram (or of the GRO buffer
	// it was coalesced into): TOS, timestamps. Valid during the callback.
	OOB []byte
	// Seg is the datagram's index in its GRO buffer (0 for the first or
	// only one): callers may parse OOB once, at Seg 0, and reuse it.
	Seg int
}

// Reader receives datagrams in batches.
type Reader struct {
	raw syscall.RawConn
	// GRO is true when the socket coalesces datagrams (UDP_GRO).
	GRO   bool
	bufs  [][]byte
	oobs  [][]byte
	names []unix.RawSockaddrInet6
	iovs  []unix.Iovec
	hdrs  []mmsghdr
}

// NewReader returns a reader of up to batch messages per call for c,
// asking the kernel for UDP GRO.
func NewReader(c *net.UDPConn, batch int) (*Reader, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp reader: %w", err)
	}
	if batch <= 0 {
		batch = 16
	}
	r := &Reader{raw: raw}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err == nil && serr == nil {
		r.GRO = true
	}
	size := 64 << 10
	if !r.GRO {
		size = 9216 + 64 // jumbo frames at most
	}
	r.bufs = make([][]byte, batch)
	r.oobs = make([][]byte, batch)
	r.names = make([]unix.RawSockaddrInet6, batch)
	r.iovs = make([]unix.Iovec, batch)
	r.hdrs = make([]mmsghdr, batch)
	for i := range r.bufs {
		r.bufs[i] = make([]byte, size)
		r.oobs[i] = make([]byte, 256)
	}
	return r, nil
}

// Read waits for datagrams (honouring the connection's read deadline),
// receives up to a batch and calls fn once per datagram, GRO buffers split
// back into their datagrams. fn must not keep pkt or m.OOB.
func (r *Reader) Read(fn func(pkt []byte, m Meta)) error {
	n := len(r.hdrs)
	for i := 0; i < n; i++ {
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(len(r.bufs[i]))
		r.hdrs[i] = mmsghdr{}
		h := &r.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = uint32(unsafe.Sizeof(r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oobs[i][0]
		h.SetControllen(len(r.oobs[i]))
	}
	var got int
	var serr error
	err := r.raw.Read(func(fd uintptr) bool {
		v, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
		if e != 0 {
			serr = e
			return e != unix.EAGAIN
		}
		got, serr = int(v), nil
		return true
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	for i := 0; i < got; i++ {
		h := &r.hdrs[i]
		data := r.bufs[i][:h.n]
		oob := r.oobs[i][:h.hdr.Controllen]
		m := Meta{From: sockaddrToAddrPort(&r.names[i]), OOB: oob}
		seg := groSize(oob)
		if seg <= 0 || seg >= len(data) {
			fn(data, m)
			continue
		}
		for off := 0; off < len(data); off += seg {
			end := off + seg
			if end > len(data) {
				end = len(data)
			}
			fn(data[off:end], m)
			m.Seg++
		}
	}
	return nil
}

// groSize returns the segment size of a GRO buffer, or 0.
func groSize(oob []byte) int {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			d := oob[unix.CmsgLen(0):l]
			if len(d) >= 4 {
				return int(*(*int32)(unsafe.Pointer(&d[0])))
			}
			return int(*(*uint16)(unsafe.Pointer(&d[0])))
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return 0
		}
		oob = oob[sp:]
	}
	return 0
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// SetBuffers sets the socket's receive and send buffers to bytes, forcing
// past the system limits when the process may (CAP_NET_ADMIN), and returns
// the receive buffer the kernel granted.
func SetBuffers(c *net.UDPConn, bytes int) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	got := 0
	_ = raw.Control(func(fd uintptr) {
		f := int(fd)
		if unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bytes) != nil {
			_ = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
		}
		if unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bytes) != nil {
			_ = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUF, bytes)
		}
		got, _ = unix.GetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	return got
}
