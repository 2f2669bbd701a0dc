package engine

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPCongestion returns the congestion-control algorithm of TCP socket
// fd (TCP_CONGESTION), "" when the kernel does not say.
func TCPCongestion(fd int) string {
	name, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil {
		return ""
	}
	return name
}

// ConnCongestion returns TCPCongestion of connection c's socket.
func ConnCongestion(c syscall.Conn) string {
	rc, err := c.SyscallConn()
	if err != nil {
		return ""
	}
	var name string
	_ = rc.Control(func(fd uintptr) { name = TCPCongestion(int(fd)) })
	return name
}

// SockOpts are socket options applied before a socket connects or binds, so
// that the very first packet (a TCP SYN included) already carries them.
type SockOpts struct {
	TOS         int  // TOS / traffic class byte; 0 leaves the default
	RecvTOS     bool // ask the kernel to report each datagram's TOS (IP_RECVTOS)
	RecvTstamp  bool // ask for a kernel receive timestamp per datagram (SO_TIMESTAMPNS)
	WindowBytes int  // SO_SNDBUF and SO_RCVBUF
	MSS         int  // TCP_MAXSEG
	NoDelay     bool // TCP_NODELAY
	// Congestion is the TCP congestion control (TCP_CONGESTION); ""
	// keeps the default.
	Congestion string
}

// Control returns a function for net.Dialer.Control and
// net.ListenConfig.Control that applies o.
func (o SockOpts) Control() func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		var opErr error
		err := c.Control(func(fd uintptr) {
			opErr = o.Apply(int(fd), isIPv6Network(network, address))
		})
		return errors.Join(err, opErr)
	}
}

// Apply sets o on an open socket. v6 selects IPv6 options.
func (o SockOpts) Apply(fd int, v6 bool) error {
	var errs []error
	set := func(level, opt, val int, what string) {
		if err := unix.SetsockoptInt(fd, level, opt, val); err != nil {
			errs = append(errs, fmt.Errorf("set %s=%d: %w", what, val, err))
		}
	}
	if o.TOS != 0 {
		if v6 {
			set(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, o.TOS, "IPV6_TCLASS")
			// A v6 socket may carry v4-mapped traffic; mark that too.
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, o.TOS)
		} else {
			set(unix.IPPROTO_IP, unix.IP_TOS, o.TOS, "IP_TOS")
		}
	}
	if o.RecvTOS {
		if v6 {
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		} else {
			set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS")
		}
	}
	if o.RecvTstamp {
		set(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS")
	}
	if o.WindowBytes > 0 {
		set(unix.SOL_SOCKET, unix.SO_SNDBUF, o.WindowBytes, "SO_SNDBUF")
		set(unix.SOL_SOCKET, unix.SO_RCVBUF, o.WindowBytes, "SO_RCVBUF")
	}
	if o.MSS > 0 {
		set(unix.IPPROTO_TCP, unix.TCP_MAXSEG, o.MSS, "TCP_MAXSEG")
	}
	if o.NoDelay {
		set(unix.IPPROTO_TCP, unix.TCP_NODELAY, 1, "TCP_NODELAY")
	}
	if o.Congestion != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion); err != nil {
			errs = append(errs, fmt.Errorf("set TCP_CONGESTION=%s (is the module loaded? see net.ipv4.tcp_available_congestion_control): %w", o.Congestion, err))
		}
	}
	return errors.Join(errs...)
}

func isIPv6Network(network, address string) bool {
	switch network {
	case "tcp6", "udp6", "ip6":
		return true
	case "tcp4", "udp4", "ip4":
		return false
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.To4() == nil
}

// LowerTimerSlack sets this thread's timer slack to 1 ns (PR_SET_TIMERSLACK)
// so short sleeps last close to what was asked (the default 50 µs slack
// turns a 10 µs sleep into about 63 µs). Call it on a locked OS thread.
func LowerTimerSlack() error {
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_TIMERSLACK: %w", err)
	}
	return nil
}

// DetachFd returns a duplicate of c's descriptor in blocking mode that Go's
// poller does not watch (a plain dup(2): os.File and net.Conn would put it
// in the poller again). Once the caller closes c, whose own descriptor the
// poller removes, packets and acknowledgements on the socket no longer
// wake a poller thread: a loop on a locked thread then makes blocking
// system calls on the returned descriptor alone (bound them with
// SO_RCVTIMEO / SO_SNDTIMEO). The caller closes it with unix.Close.
// Until c is closed, c shares the blocking mode (one open file).
func DetachFd(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
		if derr == nil {
			derr = unix.SetNonblock(fd, false)
		}
	}); err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if derr != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("duplicate socket descriptor: %w", derr)
	}
	return fd, nil
}
