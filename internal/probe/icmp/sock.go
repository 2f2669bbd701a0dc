package icmp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sockaddr converts an address and port to a kernel socket address.
func sockaddr(a netip.Addr, port int) (unix.Sockaddr, error) {
	if a.Is4() {
		return &unix.SockaddrInet4{Port: port, Addr: a.As4()}, nil
	}
	sa := &unix.SockaddrInet6{Port: port, Addr: a.As16()}
	if z := a.Zone(); z != "" {
		ifi, err := net.InterfaceByName(z)
		if err != nil {
			return nil, fmt.Errorf("zone of %s: %w", a, err)
		}
		sa.ZoneId = uint32(ifi.Index)
	}
	return sa, nil
}

func addrOf(sa unix.Sockaddr) (netip.Addr, int) {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(s.Addr), s.Port
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(s.Addr).Unmap(), s.Port
	}
	return netip.Addr{}, 0
}

// conn is one socket registered with Go's poller, so that reads and writes
// honour deadlines.
type conn struct {
	f     *os.File
	rc    syscall.RawConn
	v6    bool
	dgram bool // an unprivileged ICMP datagram socket
	proto int  // IPPROTO_ICMP, IPPROTO_ICMPV6 or IPPROTO_UDP
	// how says, for the result's notes, which socket this is.
	how string
}

func family(v6 bool) int {
	if v6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// openICMP opens an ICMP socket for dst's family in the given mode and
// binds it to src (or the wildcard address).
func openICMP(v6 bool, mode string, src netip.Addr) (*conn, error) {
	proto := unix.IPPROTO_ICMP
	if v6 {
		proto = unix.IPPROTO_ICMPV6
	}
	var errs []error
	if mode == SocketAuto || mode == SocketDgram {
		fd, err := unix.Socket(family(v6), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			return newConn(fd, v6, true, proto, src,
				"unprivileged ICMP datagram socket (net.ipv4.ping_group_range admits this group)")
		}
		errs = append(errs, fmt.Errorf("unprivileged ICMP datagram socket (needs the group in net.ipv4.ping_group_range): %w", err))
	}
	if mode == SocketAuto || mode == SocketRaw {
		fd, err := unix.Socket(family(v6), unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			how := "raw ICMP socket"
			if mode == SocketAuto {
				how += " (the unprivileged ICMP datagram socket was refused: net.ipv4.ping_group_range excludes this group)"
			}
			return newConn(fd, v6, false, proto, src, how)
		}
		errs = append(errs, fmt.Errorf("raw ICMP socket (needs CAP_NET_RAW): %w", err))
	}
	return nil, fmt.Errorf("open ICMP socket: %w", errors.Join(errs...))
}

// openUDP opens a UDP socket for dst's family bound to src (or the
// wildcard address).
func openUDP(v6 bool, src netip.Addr) (*conn, error) {
	fd, err := unix.Socket(family(v6), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket: %w", err)
	}
	return newConn(fd, v6, true, unix.IPPROTO_UDP, src, "UDP socket")
}

func newConn(fd int, v6, dgram bool, proto int, src netip.Addr, how string) (*conn, error) {
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
		if v6 {
			src = netip.IPv6Unspecified()
		}
	}
	sa, err := sockaddr(src, 0)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", src, err)
	}
	f := os.NewFile(uintptr(fd), "cnperf-"+how)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("socket raw conn: %w", err)
	}
	return &conn{f: f, rc: rc, v6: v6, dgram: dgram, proto: proto, how: how}, nil
}

func (c *conn) Close() error { return c.f.Close() }

// control runs fn on the socket's descriptor.
func (c *conn) control(fn func(fd int) error) error {
	var opErr error
	if err := c.rc.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

func (c *conn) setInt(level, opt, val int, what string) error {
	return c.control(func(fd int) error {
		if err := unix.SetsockoptInt(fd, level, opt, val); err != nil {
			return fmt.Errorf("set %s=%d: %w", what, val, err)
		}
		return nil
	})
}

// localPort returns the socket's bound port (a datagram ICMP socket's echo
// identifier).
func (c *conn) localPort() (int, error) {
	var port int
	err := c.control(func(fd int) error {
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return fmt.Errorf("socket name: %w", err)
		}
		_, port = addrOf(sa)
		return nil
	})
	return port, err
}

// setTTL sets the TTL (hop limit) of later packets.
func (c *conn) setTTL(ttl int) error {
	if c.v6 {
		return c.setInt(unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, ttl, "IPV6_UNICAST_HOPS")
	}
	return c.setInt(unix.IPPROTO_IP, unix.IP_TTL, ttl, "IP_TTL")
}

// setRecvErr asks for ICMP errors on the error queue.
func (c *conn) setRecvErr() error {
	if c.v6 {
		return c.setInt(unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1, "IPV6_RECVERR")
	}
	return c.setInt(unix.IPPROTO_IP, unix.IP_RECVERR, 1, "IP_RECVERR")
}

// filterEchoReplies lets only echo replies into a raw socket's receive
// queue (ICMP_FILTER / ICMPV6_FILTER); the error queue is not affected.
// Datagram sockets need no filter: the kernel demultiplexes them.
func (c *conn) filterEchoReplies() error {
	if c.dgram {
		return nil
	}
	return c.control(func(fd int) error {
		if c.v6 {
			var f unix.ICMPv6Filter
			for i := range f.Data {
				f.Data[i] = 0xffffffff // block
			}
			const echoReply = 129
			f.Data[echoReply>>5] &^= 1 << (echoReply & 31)
			return unix.SetsockoptICMPv6Filter(fd, unix.IPPROTO_ICMPV6, unix.ICMPV6_FILTER, &f)
		}
		// Bit n set blocks ICMP type n; type 0 is the echo reply.
		return unix.SetsockoptInt(fd, unix.SOL_RAW, unix.ICMP_FILTER, ^1)
	})
}

// send writes b to sa within timeout.
func (c *conn) send(b []byte, sa unix.Sockaddr, timeout time.Duration) error {
	if err := c.f.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("set write deadline: %w", err)
	}
	var opErr error
	err := c.rc.Write(func(fd uintptr) bool {
		opErr = unix.Sendto(int(fd), b, 0, sa)
		return opErr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return opErr
}

// packet is one datagram or one error-queue message.
type packet struct {
	data []byte     // ICMP message (raw IPv4: IP header removed); error queue: the quoted payload
	from netip.Addr // sender; error queue: the original destination
	port int        // error queue: the original destination port (UDP)
	errq bool       // read from the error queue

	ee       unix.SockExtendedErr
	eeOK     bool
	offender netip.Addr // who sent the ICMP error

	tos   int
	tosOK bool
	ts    time.Time // kernel receive timestamp
	tsOK  bool
	at    time.Time // read returned
}

// recv reads one packet (the error queue first when errq is set) before
// the read deadline set on c.f. It returns os.ErrDeadlineExceeded on
// timeout.
func (c *conn) recv(buf, oob []byte, errq bool) (packet, error) {
	return c.read(buf, oob, errq, false)
}

// recvNow reads one packet that is already queued, without waiting and
// whatever the deadline (Go's poller reports an expired deadline before
// it tries a read); it returns unix.EAGAIN when nothing is queued.
func (c *conn) recvNow(buf, oob []byte, errq bool) (packet, error) {
	return c.read(buf, oob, errq, true)
}

func (c *conn) read(buf, oob []byte, errq, now bool) (packet, error) {
	var p packet
	var opErr error
	var n, oobn int
	var from unix.Sockaddr
	try := func(fd uintptr) bool {
		for range 4 {
			if errq {
				var e error
				n, oobn, _, from, e = unix.Recvmsg(int(fd), buf, oob, unix.MSG_ERRQUEUE)
				if e == nil {
					p.errq = true
					return true
				}
				if e != unix.EAGAIN {
					opErr = fmt.Errorf("read error queue: %w", e)
					return true
				}
			}
			var e error
			n, oobn, _, from, e = unix.Recvmsg(int(fd), buf, oob, 0)
			switch {
			case e == nil:
				return true
			case e == unix.EAGAIN:
				return false
			case errq && isICMPErrno(e):
				// A pending ICMP error surfaced on the normal queue; its
				// message is (or was) on the error queue. Read again.
				continue
			default:
				opErr = fmt.Errorf("read: %w", e)
				return true
			}
		}
		return false
	}
	var err error
	if now {
		err = c.rc.Control(func(fd uintptr) {
			if !try(fd) && opErr == nil {
				opErr = unix.EAGAIN
			}
		})
	} else {
		err = c.rc.Read(try)
	}
	p.at = time.Now()
	if err != nil {
		return p, err
	}
	if opErr != nil {
		return p, opErr
	}
	p.data = buf[:n]
	p.from, p.port = addrOf(from)
	parseCmsgs(oob[:oobn], &p)
	if !p.errq && c.proto == unix.IPPROTO_ICMP && !c.dgram && n >= 20 && buf[0]>>4 == 4 {
		// A raw IPv4 socket hands over the IP header too.
		ihl := int(buf[0]&0x0f) * 4
		if !p.tosOK {
			p.tos, p.tosOK = int(buf[1]), true
		}
		if ihl <= n {
			p.data = buf[ihl:n]
		}
	}
	return p, nil
}

func isICMPErrno(e error) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EPROTO, unix.EMSGSIZE, unix.EACCES:
		return true
	}
	return false
}

// parseCmsgs fills p's TOS, kernel timestamp and extended error from a
// datagram's control messages.
func parseCmsgs(oob []byte, p *packet) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	ne := binary.NativeEndian
	for _, m := range msgs {
		h, d := m.Header, m.Data
		switch {
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_TIMESTAMPNS && len(d) >= 16:
			p.ts, p.tsOK = time.Unix(int64(ne.Uint64(d[0:8])), int64(ne.Uint64(d[8:16]))), true
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(d) >= 1:
			p.tos, p.tosOK = int(d[0]), true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(d) >= 4:
			p.tos, p.tosOK = int(ne.Uint32(d[0:4])), true
		case (h.Level == unix.IPPROTO_IP && h.Type == unix.IP_RECVERR) ||
			(h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_RECVERR):
			if len(d) < 16 {
				continue
			}
			p.ee = unix.SockExtendedErr{
				Errno: ne.Uint32(d[0:4]), Origin: d[4], Type: d[5], Code: d[6], Pad: d[7],
				Info: ne.Uint32(d[8:12]), Data: ne.Uint32(d[12:16]),
			}
			p.eeOK = true
			// SO_EE_OFFENDER: a sockaddr right after the struct.
			off := d[16:]
			if len(off) >= 8 && ne.Uint16(off[0:2]) == unix.AF_INET {
				p.offender = netip.AddrFrom4([4]byte(off[4:8]))
			} else if len(off) >= 24 && ne.Uint16(off[0:2]) == unix.AF_INET6 {
				p.offender = netip.AddrFrom16([16]byte(off[8:24])).Unmap()
			}
		}
	}
}

// rttOf returns the round trip from sent to p's arrival: the kernel
// receive timestamp when there is a sane one, else the time the read
// returned. kernel is false in the second case.
func rttOf(p packet, sent time.Time) (rtt time.Duration, kernel bool) {
	user := p.at.Sub(sent) // monotonic
	if p.tsOK {
		// p.ts has no monotonic reading, so this difference is wall clock.
		if k := p.ts.Sub(sent); k >= 0 && k <= user {
			return k, true
		}
	}
	return user, false
}

// sendErr turns a send failure into a clear error.
func sendErr(dst netip.Addr, err error) error {
	switch {
	case errors.Is(err, unix.ENETUNREACH):
		return fmt.Errorf("no route to %s (network unreachable): %w", dst, err)
	case errors.Is(err, unix.EHOSTUNREACH):
		return fmt.Errorf("host %s unreachable: %w", dst, err)
	case errors.Is(err, unix.EMSGSIZE):
		return fmt.Errorf("send to %s: packet too big for the path: %w", dst, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("send to %s: timed out: %w", dst, err)
	}
	return fmt.Errorf("send to %s: %w", dst, err)
}

// wakeOnCancel makes a blocked read return when ctx ends; call the
// returned stop when done.
func wakeOnCancel(ctx context.Context, c *conn) func() bool {
	return context.AfterFunc(ctx, func() { _ = c.f.SetReadDeadline(time.Now()) })
}

// setDontFragment makes the socket send with DF (IPv6: never fragment
// locally) and honour the path MTU the kernel learns: a send larger than
// it fails with EMSGSIZE.
func setDontFragment(fd int, v6 bool) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("IPV6_MTU_DISCOVER: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return fmt.Errorf("IP_MTU_DISCOVER: %w", err)
	}
	return nil
}
