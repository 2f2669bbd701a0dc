// Package udpio moves UDP datagrams in batches: sendmmsg with UDP
// segmentation offload (UDP_SEGMENT, "GSO") on the sending side and recvmmsg
// with UDP receive offload (UDP_GRO) on the receiving side, so one system
// call carries tens of datagrams. Whether the kernel and the socket accept
// each feature is found out at run time; when one is refused the package
// falls back cleanly (GSO → one datagram per mmsg entry → one datagram per
// system call) and says so in Notes. Received GRO super-packets are split
// back into the datagrams the sender wrote, using the segment size the
// kernel reports with each one.
//
// It works on *net.UDPConn sockets through their syscall.RawConn, so read
// and write deadlines set on the connection bound every call, and on
// blocking descriptors outside Go's poller (NewSenderFd, NewReceiverFd),
// for loops that have their OS thread to themselves. Linux only; it
// does not import the probe package, so the probe responder can use it.
package udpio

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode says how datagrams cross the system-call boundary.
type Mode int

// Modes, fastest first.
const (
	ModeGSO   Mode = iota // sendmmsg + UDP_SEGMENT, or recvmmsg + UDP_GRO
	ModeMmsg              // sendmmsg / recvmmsg, one datagram per entry
	ModePlain             // one datagram per system call
)

func (m Mode) String() string {
	switch m {
	case ModeGSO:
		return "gso"
	case ModeMmsg:
		return "mmsg"
	case ModePlain:
		return "plain"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// RecvString names a receiver's mode: "gro" (recvmmsg with UDP GRO),
// "mmsg" or "plain".
func (m Mode) RecvString() string {
	if m == ModeGSO {
		return "gro"
	}
	return m.String()
}

// Options select the features to try.
type Options struct {
	// NoOffload never uses UDP_SEGMENT or UDP_GRO.
	NoOffload bool
	// NoBatch uses one system call per datagram (implies NoOffload).
	NoBatch bool
}

// MaxSegments bounds the datagrams in one GSO super-packet (the kernel's
// UDP_MAX_SEGMENTS is 64 on older kernels).
const MaxSegments = 64

// maxGSOBytes bounds one GSO super-packet's payload: an IPv4 datagram is at
// most 65535 bytes with its 20-byte IP and 8-byte UDP headers.
const maxGSOBytes = 65507

// MaxDatagram is the largest UDP payload over IPv4.
const MaxDatagram = 65507

// SegmentsPerSend returns how many datagrams of size bytes fit in one GSO
// super-packet.
func SegmentsPerSend(size int) int {
	if size <= 0 {
		return 1
	}
	n := maxGSOBytes / size
	if n > MaxSegments {
		n = MaxSegments
	}
	if n < 1 {
		n = 1
	}
	return n
}

// rawConn returns c's RawConn and its address family.
func rawConn(c *net.UDPConn) (syscall.RawConn, int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, 0, fmt.Errorf("udp socket: %w", err)
	}
	family := unix.AF_INET
	var serr error
	if err := rc.Control(func(fd uintptr) {
		sa, err := unix.Getsockname(int(fd))
		if err != nil {
			serr = err
			return
		}
		if _, ok := sa.(*unix.SockaddrInet6); ok {
			family = unix.AF_INET6
		}
	}); err != nil {
		return nil, 0, fmt.Errorf("udp socket: %w", err)
	}
	if serr != nil {
		return nil, 0, fmt.Errorf("udp socket getsockname: %w", serr)
	}
	return rc, family, nil
}

// SetRecvBuffer asks for a receive buffer of n bytes: SO_RCVBUFFORCE first
// (it passes net.core.rmem_max when the process has CAP_NET_ADMIN), then
// SO_RCVBUF. It returns the size the kernel granted (the kernel doubles the
// request for bookkeeping; the figure is what getsockopt reports).
func SetRecvBuffer(c *net.UDPConn, n int) (int, error) {
	return setBuffer(c, n, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF")
}

// SetSendBuffer is SetRecvBuffer for SO_SNDBUF.
func SetSendBuffer(c *net.UDPConn, n int) (int, error) {
	return setBuffer(c, n, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF")
}

// setBuffer sets a socket buffer with the forcing option, else the plain
// one, and returns the size the kernel reports.
func setBuffer(c *net.UDPConn, n, force, plain int, name string) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("udp socket: %w", err)
	}
	return setBufferRaw(rc, n, force, plain, name)
}

// SetRecvBufferFd is SetRecvBuffer for a descriptor outside Go's poller.
func SetRecvBufferFd(fd int, n int) (int, error) {
	return setBufferRaw(fdConn(fd), n, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF")
}

func setBufferRaw(rc syscall.RawConn, n, force, plain int, name string) (int, error) {
	var got int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, n); e != nil {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, plain, n); e != nil {
				serr = fmt.Errorf("set %s=%d: %w", name, n, e)
			}
		}
		got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, plain)
	}); err != nil {
		return 0, err
	}
	return got, serr
}

// isOffloadRefusal reports errors by which the kernel or the device turns
// down a GSO send: the path's device cannot checksum (EIO), the segment
// does not fit the MTU or the kernel knows no UDP_SEGMENT (EINVAL,
// ENOPROTOOPT, EOPNOTSUPP).
func isOffloadRefusal(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP) ||
		errors.Is(err, unix.EMSGSIZE)
}

// isNoBatch reports errors meaning sendmmsg/recvmmsg do not exist here.
func isNoBatch(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)
}
