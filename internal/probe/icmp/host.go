package icmp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
)

// Socket modes for the ICMP socket (Ping.Socket, Trace.Socket).
const (
	SocketAuto  = ""      // datagram socket where allowed, raw otherwise
	SocketDgram = "dgram" // unprivileged ICMP datagram ("ping") socket only
	SocketRaw   = "raw"   // raw ICMP socket only (needs CAP_NET_RAW)
)

// resolveTimeout bounds a name lookup.
const resolveTimeout = 5 * time.Second

// maxPayload is the largest echo or probe payload accepted (65535 minus a
// 20-byte IPv4 header and an 8-byte ICMP/UDP header), for both families.
const maxPayload = 65507

func checkSocketMode(m string) error {
	switch m {
	case SocketAuto, SocketDgram, SocketRaw:
		return nil
	}
	return fmt.Errorf("socket mode %q: want %q, %q or empty (auto)", m, SocketDgram, SocketRaw)
}

// checkHost rejects targets that are not a bare host (ping and trace take
// no port).
func checkHost(target string) error {
	h := strings.TrimSuffix(strings.TrimPrefix(target, "["), "]")
	if h == "" {
		return errors.New("target: missing host")
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if strings.ContainsAny(h, ":/ ") {
		return fmt.Errorf("target %q: want a host name or IP address, without a port", target)
	}
	return nil
}

// resolve turns target into one address: the first the resolver returns,
// of src's family when src is set.
func resolve(ctx context.Context, target string, src netip.Addr) (netip.Addr, error) {
	h := strings.TrimSuffix(strings.TrimPrefix(target, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		a = a.Unmap()
		if src.IsValid() && src.Is4() != a.Is4() {
			return netip.Addr{}, fmt.Errorf("target %s and source %s are of different IP families", a, src)
		}
		return a, nil
	}
	network := "ip"
	if src.IsValid() {
		network = map[bool]string{true: "ip4", false: "ip6"}[src.Is4()]
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, network, h)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return netip.Addr{}, fmt.Errorf("resolve host %q: no such host", h)
		}
		return netip.Addr{}, fmt.Errorf("resolve host %q (within %v): %w", h, resolveTimeout, err)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve host %q: no %s address", h, network)
	}
	return addrs[0].Unmap(), nil
}

// routeSource returns the local address the kernel would use towards dst
// (src when set). It connects a UDP socket, which sends nothing but looks
// the route up, so a missing route is reported before any probe is sent.
func routeSource(ctx context.Context, dst, src netip.Addr) (netip.Addr, error) {
	d := net.Dialer{Timeout: resolveTimeout}
	if src.IsValid() {
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	c, err := d.DialContext(ctx, "udp", netip.AddrPortFrom(dst, 9).String())
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return netip.Addr{}, fmt.Errorf("no route to %s: %w", dst, err)
		}
		if errors.Is(err, unix.EADDRNOTAVAIL) && !src.IsValid() {
			return netip.Addr{}, fmt.Errorf("no route to %s (no local address to reach it from): %w", dst, err)
		}
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return netip.Addr{}, fmt.Errorf("source %s is not an address of this host: %w", src, err)
		}
		return netip.Addr{}, fmt.Errorf("find route to %s: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// privileged reports whether this process may use raw sockets
// (CAP_NET_RAW in its effective set).
func privileged() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid() == 0
	}
	return data[0].Effective&(1<<unix.CAP_NET_RAW) != 0
}

// payload returns size bytes starting with token (as much as fits), then a
// counting pattern, as ping fills its packets.
func payload(size int, token [8]byte) []byte {
	b := make([]byte, size)
	n := copy(b, token[:])
	for i := n; i < size; i++ {
		b[i] = byte(i)
	}
	return b
}

// hasToken reports whether data starts with as much of token as size
// allows.
func hasToken(data []byte, size int, token [8]byte) bool {
	n := min(size, len(token))
	return len(data) >= n && string(data[:n]) == string(token[:n])
}

// validateHostSpec returns what ping and trace both reject: bad common
// fields and a target that is not a host.
func validateHostSpec(s probe.Spec) []error {
	var errs []error
	if err := s.ValidateCommon(false); err != nil {
		errs = append(errs, err)
	}
	if s.Target != "" {
		if err := checkHost(s.Target); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
