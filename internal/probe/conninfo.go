package probe

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ConnTOS returns the TOS byte (IPv4) or traffic class (IPv6) of segments
// the peer sent on an established TCP connection, as the kernel kept it
// (IP_PKTOPTIONS / IPV6_2292PKTOPTIONS; the listener must have asked with
// IP_RECVTOS / IPV6_RECVTCLASS before the handshake). ok is false when the
// kernel did not say.
func ConnTOS(c net.Conn) (tos int, ok bool) {
	sc, isSC := c.(syscall.Conn)
	if !isSC {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	v6 := false
	if ta, isTA := c.LocalAddr().(*net.TCPAddr); isTA && ta.IP.To4() == nil {
		v6 = true
	}
	_ = raw.Control(func(fd uintptr) {
		if v6 {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			tos, ok = pktOptionsTOS(int(fd), unix.IPPROTO_IPV6, unix.IPV6_2292PKTOPTIONS)
			return
		}
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		tos, ok = pktOptionsTOS(int(fd), unix.IPPROTO_IP, unix.IP_PKTOPTIONS)
	})
	return tos, ok
}

func pktOptionsTOS(fd, level, opt int) (int, bool) {
	buf := make([]byte, 512)
	l := uint32(len(buf))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 || l == 0 || int(l) > len(buf) {
		return 0, false
	}
	tos, ok, _, _ := ParseTOSCmsgs(buf[:l])
	return tos, ok
}

// TCPInfo is the part of TCP_INFO probes report.
type TCPInfo struct {
	Retransmits int64   // segments retransmitted over the connection's life
	SRTTms      float64 // smoothed RTT
}

// ConnTCPInfo reads TCP_INFO of a TCP connection.
func ConnTCPInfo(c net.Conn) (TCPInfo, bool) {
	sc, isSC := c.(syscall.Conn)
	if !isSC {
		return TCPInfo{}, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return TCPInfo{}, false
	}
	var ti *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return TCPInfo{}, false
	}
	return TCPInfo{Retransmits: int64(ti.Total_retrans), SRTTms: float64(ti.Rtt) / 1000}, true
}

// ApplyConn sets o on an established connection (for options that may be
// set after connect: TOS of later segments, buffers).
func ApplyConn(c net.Conn, o SockOpts) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	v6 := false
	if ta, isTA := c.LocalAddr().(*net.TCPAddr); isTA && ta.IP.To4() == nil {
		v6 = true
	}
	if ua, isUA := c.LocalAddr().(*net.UDPAddr); isUA && ua.IP.To4() == nil {
		v6 = true
	}
	var aerr error
	if err := raw.Control(func(fd uintptr) { aerr = o.Apply(int(fd), v6) }); err != nil {
		return err
	}
	return aerr
}

// SetDSCPReceived records the TOS byte seen on arrival and whether its DSCP
// is the one sent.
func (r *Result) SetDSCPReceived(tos int) {
	d := tos >> 2
	r.DSCPReceived = &d
	r.DSCPSurvived = Bool(d == r.DSCP)
}
