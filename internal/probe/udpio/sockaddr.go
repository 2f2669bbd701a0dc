package udpio

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// putSockaddr writes to as a raw sockaddr for a socket of family into b
// and returns its length.
func putSockaddr(b *[unix.SizeofSockaddrInet6]byte, family int, to netip.AddrPort) (int, error) {
	*b = [unix.SizeofSockaddrInet6]byte{}
	a := to.Addr()
	switch family {
	case unix.AF_INET:
		if !a.Unmap().Is4() {
			return 0, fmt.Errorf("address %s: not IPv4 on an IPv4 socket", to)
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b[0]))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], to.Port())
		sa.Addr = a.Unmap().As4()
		return unix.SizeofSockaddrInet4, nil
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&b[0]))
		sa.Family = unix.AF_INET6
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], to.Port())
		sa.Addr = a.As16() // IPv4 becomes v4-mapped
		return unix.SizeofSockaddrInet6, nil
	}
	return 0, fmt.Errorf("unsupported address family %d", family)
}

// parseSockaddr reads a raw sockaddr written by the kernel.
func parseSockaddr(b []byte) netip.AddrPort {
	if len(b) < 2 {
		return netip.AddrPort{}
	}
	switch *(*uint16)(unsafe.Pointer(&b[0])) {
	case unix.AF_INET:
		if len(b) < unix.SizeofSockaddrInet4 {
			return netip.AddrPort{}
		}
		port := binary.BigEndian.Uint16(b[2:4])
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
	case unix.AF_INET6:
		if len(b) < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}
		}
		port := binary.BigEndian.Uint16(b[2:4])
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port)
	}
	return netip.AddrPort{}
}
