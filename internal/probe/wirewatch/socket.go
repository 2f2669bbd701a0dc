package wirewatch

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// socket is an AF_PACKET SOCK_DGRAM socket on one device with a kernel
// filter: reads start at the IP header, in both directions (outgoing
// packets as the device hands them to the wire, incoming as it got them).
type socket struct {
	fd int
}

// htons turns a protocol number into network byte order, as AF_PACKET
// wants it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openSocket opens the socket on ifindex with prog attached before any
// packet can arrive (created with protocol 0, which receives nothing,
// then filtered, then bound to ETH_P_ALL on the device), and a receive
// timeout of poll so reads return to check the deadline.
func openSocket(ifindex int, prog []bpf.Instruction, poll time.Duration) (*socket, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assemble the kernel filter: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("open a packet socket: the agent lacks CAP_NET_RAW (the host-network agent's container adds NET_RAW): %w", err)
		}
		return nil, fmt.Errorf("open a packet socket: %w", err)
	}
	s := &socket{fd: fd}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		s.Close()
		return nil, fmt.Errorf("attach the kernel filter: %w", err)
	}
	tv := unix.NsecToTimeval(poll.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		s.Close()
		return nil, fmt.Errorf("set the receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind the packet socket to interface %d: %w", ifindex, err)
	}
	return s, nil
}

// read reads one packet into b; timeout is true when none came within
// the poll interval.
func (s *socket) read(b []byte) (n int, timeout bool, err error) {
	for {
		n, _, err = unix.Recvfrom(s.fd, b, 0)
		switch {
		case err == nil:
			return n, false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("read the packet socket: %w", err)
	}
}

// dropped returns the packets the kernel matched but could not queue to
// the socket since the last call.
func (s *socket) dropped() (int64, error) {
	st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, fmt.Errorf("read the packet socket's statistics: %w", err)
	}
	return int64(st.Drops), nil
}

// Close closes the socket.
func (s *socket) Close() error { return unix.Close(s.fd) }

// underlay returns the device the node's route to target leaves by: a
// UDP socket connected to it (nothing is sent) has the route's source
// address, and the device holding that address is the one watched.
func underlay(target string) (*net.Interface, error) {
	c, err := net.DialTimeout("udp4", net.JoinHostPort(target, "9"), time.Second)
	if err != nil {
		return nil, fmt.Errorf("find the route to %s: %w", target, err)
	}
	local := c.LocalAddr().(*net.UDPAddr).IP
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(local) {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %s, the source of the route to %s", local, target)
}
