package tcp

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/engine"
)

// rawConn returns c's syscall.RawConn, or an error for non-socket conns.
func rawConn(c net.Conn) (syscall.RawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("connection %T has no file descriptor", c)
	}
	return sc.SyscallConn()
}

func isV6(c net.Conn) bool {
	a, ok := c.LocalAddr().(*net.TCPAddr)
	return ok && a.IP.To4() == nil
}

// EnableArrivedTOS asks the kernel to record the TOS byte (IPv4) or traffic
// class (IPv6) of the packets arriving on a TCP connection, for ArrivedTOS.
// It only sets socket options; call it on an accepted or dialled conn.
func EnableArrivedTOS(c net.Conn) error {
	rc, err := rawConn(c)
	if err != nil {
		return err
	}
	v6 := isV6(c)
	var opErr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			// A v6 socket may carry v4-mapped traffic.
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		} else {
			opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	})
	if err = errors.Join(err, opErr); err != nil {
		return fmt.Errorf("enable TOS recording: %w", err)
	}
	return nil
}

// ArrivedTOS returns the TOS byte the kernel recorded for packets that
// arrived on TCP connection c, read with getsockopt IP_PKTOPTIONS (IPv4) or
// IPV6_2292PKTOPTIONS (IPv6), which return it as the IP_TOS / IPV6_TCLASS
// control message once EnableArrivedTOS was called. For IPv4 the kernel
// records the TOS of the packet that completed the connection's handshake;
// for IPv6 the traffic class of the latest segment received. ok is false
// when the kernel reported nothing.
func ArrivedTOS(c net.Conn) (tos int, ok bool, err error) {
	rc, err := rawConn(c)
	if err != nil {
		return 0, false, err
	}
	v6 := isV6(c)
	var buf [256]byte
	var n int
	var opErr error
	err = rc.Control(func(fd uintptr) {
		level, opt := unix.IPPROTO_IP, unix.IP_PKTOPTIONS
		if v6 {
			level, opt = unix.IPPROTO_IPV6, unix.IPV6_2292PKTOPTIONS
		}
		n, opErr = getsockoptBytes(int(fd), level, opt, buf[:])
	})
	if err = errors.Join(err, opErr); err != nil {
		return 0, false, fmt.Errorf("read arrived TOS (pktoptions): %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(buf[:n])
	if err != nil {
		return 0, false, fmt.Errorf("read arrived TOS: parse control messages: %w", err)
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			return int(m.Data[0]), true, nil
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 1:
			return int(m.Data[0]), true, nil // native-endian int, low byte first on amd64/arm64
		}
	}
	return 0, false, nil
}

// getsockoptBytes reads a variable-length socket option into buf.
func getsockoptBytes(fd, level, opt int, buf []byte) (int, error) {
	l := uint32(len(buf))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return int(l), nil
}

// tcpInfo is what the sender reads from TCP_INFO.
type tcpInfo struct {
	Retrans int64  // total retransmitted segments
	SRTTus  uint32 // smoothed RTT, µs
}

// readTCPInfo reads TCP_INFO of c.
func readTCPInfo(c net.Conn) (tcpInfo, error) {
	rc, err := rawConn(c)
	if err != nil {
		return tcpInfo{}, err
	}
	var ti *unix.TCPInfo
	var opErr error
	err = rc.Control(func(fd uintptr) {
		ti, opErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err = errors.Join(err, opErr); err != nil {
		return tcpInfo{}, fmt.Errorf("read TCP_INFO: %w", err)
	}
	return tcpInfo{Retrans: int64(ti.Total_retrans), SRTTus: ti.Rtt}, nil
}

// setTOS marks c's later packets with tos (the responder's data
// connections in reverse mode; its SYN-ACK is already gone).
func setTOS(c net.Conn, tos int) error {
	if tos == 0 {
		return nil
	}
	rc, err := rawConn(c)
	if err != nil {
		return err
	}
	v6 := isV6(c)
	var opErr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		} else {
			opErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		}
	})
	if err = errors.Join(err, opErr); err != nil {
		return fmt.Errorf("set TOS %#x: %w", tos, err)
	}
	return nil
}

// setBuffers sets SO_SNDBUF and SO_RCVBUF on an accepted conn.
func setBuffers(c net.Conn, bytes int) error {
	if bytes <= 0 {
		return nil
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	return errors.Join(tc.SetReadBuffer(bytes), tc.SetWriteBuffer(bytes))
}

// Retransmits reads TCP_INFO's total retransmitted segments of c (for
// engines outside this package that report them, such as iperf3wire).
func Retransmits(c net.Conn) (int64, error) {
	ti, err := readTCPInfo(c)
	return ti.Retrans, err
}

// setCongestion sets the connection's congestion control (TCP_CONGESTION).
func setCongestion(c net.Conn, name string) error {
	rc, err := rawConn(c)
	if err != nil {
		return err
	}
	var opErr error
	err = rc.Control(func(fd uintptr) { opErr = engine.SockOpts{Congestion: name}.Apply(int(fd), false) })
	return errors.Join(err, opErr)
}
