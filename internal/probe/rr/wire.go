package rr

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transaction layout. A UDP request or response is the 12-byte
// engine.PacketHeader followed by the body; a TCP one is the body alone.
// Body: sequence number (8 bytes), the responder's kernel receive time of
// the request (8, ns since the epoch), its clock right before the reply's
// write (8), the TOS the responder saw on the request (1), flags (1), then
// padding up to Size. Requests carry zeros where the responder fills in.
const (
	offSeq   = 0
	offRx    = 8
	offTx    = 16
	offTOS   = 24
	offFlags = 25
	bodyLen  = 26

	flagTOSValid = 1 << 0 // offTOS holds the TOS the responder saw
	flagKernelRx = 1 << 1 // offRx is a kernel timestamp (else the responder's clock after read)
)

// body is a view of one transaction's body.
type body []byte

func (b body) seq() uint64      { return binary.BigEndian.Uint64(b[offSeq:]) }
func (b body) setSeq(v uint64)  { binary.BigEndian.PutUint64(b[offSeq:], v) }
func (b body) rx() int64        { return int64(binary.BigEndian.Uint64(b[offRx:])) }
func (b body) setRx(v int64)    { binary.BigEndian.PutUint64(b[offRx:], uint64(v)) }
func (b body) tx() int64        { return int64(binary.BigEndian.Uint64(b[offTx:])) }
func (b body) setTx(v int64)    { binary.BigEndian.PutUint64(b[offTx:], uint64(v)) }
func (b body) tos() (int, bool) { return int(b[offTOS]), b[offFlags]&flagTOSValid != 0 }
func (b body) kernelRx() bool   { return b[offFlags]&flagKernelRx != 0 }

// receiver reads with recvmsg through a preallocated header, so a read
// allocates nothing, and extracts the SO_TIMESTAMPNS control message.
type receiver struct {
	msg unix.Msghdr
	iov unix.Iovec
	oob [256]byte
}

// recv reads into buf from fd once (blocking or not, as fd is). ts is the
// kernel receive time in ns since the epoch, 0 when absent.
func (r *receiver) recv(fd int, buf []byte, flags int) (n int, ts int64, errno unix.Errno) {
	r.prepare(buf)
	nn, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.msg)), uintptr(flags))
	if e != 0 {
		return 0, 0, e
	}
	return int(nn), timestampNs(r.oob[:r.msg.Controllen]), 0
}

// recvWaiting is recv of what is already queued, without waiting
// (MSG_DONTWAIT), as a raw system call: one that cannot block needs none
// of the Go runtime's bookkeeping for a system call that may (on entry and
// on exit). EAGAIN: nothing was queued.
func (r *receiver) recvWaiting(fd int, buf []byte) (n int, ts int64, errno unix.Errno) {
	r.prepare(buf)
	nn, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.msg)), unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, 0, e
	}
	return int(nn), timestampNs(r.oob[:r.msg.Controllen]), 0
}

func (r *receiver) prepare(buf []byte) {
	r.iov.Base = &buf[0]
	r.iov.SetLen(len(buf))
	r.msg.Iov = &r.iov
	r.msg.SetIovlen(1)
	r.msg.Control = &r.oob[0]
	r.msg.SetControllen(len(r.oob))
	r.msg.Name = nil
	r.msg.Namelen = 0
}

// peekPolicy decides whether the TCP client looks for a response with
// recvWaiting before it blocks in recv. When client and responder share a
// CPU, the responder's wake-up preempts the client right after its write
// and the client comes back to find the response queued: the look finds
// it, and the blocking call's bookkeeping is saved. When they run on two
// CPUs the response is not there yet and the look is a wasted system call
// (about 0.3 µs of a 50 µs round trip), so after a miss the client looks
// again only every peekRetry transactions, to notice the kernel moving the
// two ends onto one CPU.
type peekPolicy struct {
	missed bool
	n      uint32
}

const peekRetry = 64

func (p *peekPolicy) try() bool {
	if !p.missed {
		return true
	}
	p.n++
	return p.n%peekRetry == 0
}

func (p *peekPolicy) result(found bool) { p.missed = !found }

// timestampNs finds SCM_TIMESTAMPNS in control messages without
// allocating.
func timestampNs(oob []byte) int64 {
	const hdr = unix.SizeofCmsghdr
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= hdr+16 {
			d := oob[cmsgAlign(hdr):]
			sec := int64(binary.NativeEndian.Uint64(d[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(d[8:16]))
			return sec*1e9 + nsec
		}
		a := cmsgAlign(l)
		if a > len(oob) {
			return 0
		}
		oob = oob[a:]
	}
	return 0
}

func cmsgAlign(n int) int { return (n + 7) &^ 7 }
