package iperf3wire

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// retransmits reads TCP_INFO's total retransmissions of a TCP connection;
// ok is false when the kernel does not say.
func retransmits(c net.Conn) (n int64, ok bool) {
	sc, isSC := c.(syscall.Conn)
	if !isSC {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var opErr error
	if err := raw.Control(func(fd uintptr) {
		info, opErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || opErr != nil {
		return 0, false
	}
	return int64(info.Total_retrans), true
}
