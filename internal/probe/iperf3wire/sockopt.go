package iperf3wire

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/engine"
)

// sysRefusal is a socket option the server could not set for the test:
// iperf3's error code and the errno that says why, which the stock client
// prints as "unable to set ...: <errno's text>".
type sysRefusal struct {
	code  int32
	errno syscall.Errno
	msg   string
}

func (r *sysRefusal) Error() string { return r.msg }

// tcpSockInfo is what the server set and read back on one TCP data
// socket, for its own document.
type tcpSockInfo struct {
	sndbuf, rcvbuf int    // SO_SNDBUF, SO_RCVBUF as the kernel reports them
	mss            int    // TCP_MAXSEG as the kernel reports it
	congestion     string // TCP_CONGESTION, "" when unreadable
	tos            int    // IP_TOS (IPV6_TCLASS on IPv6) as read back
}

// control runs f on c's file descriptor.
func control(c net.Conn, f func(fd int) error) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("connection %T has no file descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = f(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

// isV6Conn reports whether c's socket is IPv6 (it may carry v4-mapped
// traffic).
func isV6Conn(c net.Conn) bool {
	a, ok := c.LocalAddr().(*net.TCPAddr)
	return ok && a.IP.To4() == nil
}

// setupTCPStream applies the test's socket options to one accepted TCP
// data connection as iperf3's server applies them (TCP_CONGESTION at
// accept, TOS in iperf_init_stream, -w and -M on its listening socket,
// which cnperf's shared listener cannot take, so on the accepted socket),
// and reads back what the kernel holds. A congestion-control algorithm the
// kernel does not have (ENOENT) is, as in iperf3, a warning, not an error.
func setupTCPStream(c net.Conn, p Params) (tcpSockInfo, []string, error) {
	var info tcpSockInfo
	var warnings []string
	v6 := isV6Conn(c)
	err := control(c, func(fd int) error {
		if p.Congestion != "" {
			if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, p.Congestion); err != nil {
				if !errors.Is(err, unix.ENOENT) {
					return refusalFor(errSetCongestion, "-C "+p.Congestion, err)
				}
				warnings = append(warnings, fmt.Sprintf("TCP congestion control algorithm %q not supported", p.Congestion))
			}
		}
		if p.Window > 0 {
			for _, opt := range []int{unix.SO_SNDBUF, unix.SO_RCVBUF} {
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, p.Window); err != nil {
					return refusalFor(errSetBuf, fmt.Sprintf("-w %d", p.Window), err)
				}
			}
		}
		if p.MSS > 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, p.MSS); err != nil {
				return refusalFor(errSetMSS, fmt.Sprintf("-M %d", p.MSS), err)
			}
		}
		if p.TOS > 0 {
			if err := setTOSFd(fd, v6, p.TOS); err != nil {
				return err
			}
		}
		info.sndbuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		info.rcvbuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		info.mss, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
		info.congestion = engine.TCPCongestion(fd)
		if v6 {
			info.tos, _ = unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS)
		} else {
			info.tos, _ = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS)
		}
		return nil
	})
	if err != nil {
		return info, warnings, err
	}
	// iperf3 checks that the kernel gave at least the buffer asked for
	// (Linux doubles it, up to net.core.wmem_max and rmem_max).
	if p.Window > 0 && (info.sndbuf < p.Window || info.rcvbuf < p.Window) {
		return info, warnings, &sysRefusal{code: errSetBuf2, msg: fmt.Sprintf(
			"-w %d: the kernel gave SO_SNDBUF %d, SO_RCVBUF %d (see net.core.wmem_max, rmem_max)", p.Window, info.sndbuf, info.rcvbuf)}
	}
	return info, warnings, nil
}

// setTOSFd marks a socket's later packets with tos: IP_TOS, and on an
// IPv6 socket IPV6_TCLASS too (IP_TOS then covers v4-mapped peers).
func setTOSFd(fd int, v6 bool, tos int) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos); err != nil {
			return refusalFor(errSetCOS, fmt.Sprintf("-S %#x", tos), err)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tos)
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tos); err != nil {
		return refusalFor(errSetTOS, fmt.Sprintf("-S %#x", tos), err)
	}
	return nil
}

// refusalFor wraps a failed setsockopt as iperf3's error code with its
// errno.
func refusalFor(code int32, what string, err error) error {
	var errno syscall.Errno
	errors.As(err, &errno)
	return &sysRefusal{code: code, errno: errno, msg: what + ": " + err.Error()}
}

// growUDPBuffers serves -w on the responder's UDP socket, which every UDP
// test on its port shares: it grows SO_SNDBUF and SO_RCVBUF to at least
// window bytes and never shrinks them, and fails as iperf3 does (socket
// buffer size not set correctly) when the kernel will not give that much.
func growUDPBuffers(uc *net.UDPConn, window int) (sndbuf, rcvbuf int, err error) {
	err = control(uc, func(fd int) error {
		for _, o := range []struct {
			opt int
			got *int
		}{{unix.SO_SNDBUF, &sndbuf}, {unix.SO_RCVBUF, &rcvbuf}} {
			cur, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.opt)
			if err != nil {
				return refusalFor(errSetBuf, fmt.Sprintf("-w %d", window), err)
			}
			if cur < window {
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, window); err != nil {
					return refusalFor(errSetBuf, fmt.Sprintf("-w %d", window), err)
				}
				cur, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.opt)
			}
			*o.got = cur
		}
		return nil
	})
	if err == nil && (sndbuf < window || rcvbuf < window) {
		err = &sysRefusal{code: errSetBuf2, msg: fmt.Sprintf(
			"-w %d: the shared UDP socket has SO_SNDBUF %d, SO_RCVBUF %d (see net.core.wmem_max, rmem_max)", window, sndbuf, rcvbuf)}
	}
	return sndbuf, rcvbuf, err
}

func getsockoptMSS(fd int) (int, error) {
	return unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
}
