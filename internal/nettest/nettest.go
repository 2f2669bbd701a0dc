// Package nettest makes throwaway network namespaces for tests and
// benchmarks: two namespaces joined by a veth pair, with addresses from the
// benchmarking range 198.18.0.0/15 and a ULA IPv6 prefix, so nothing they
// carry can reach a real network. It needs root (CAP_SYS_ADMIN and
// CAP_NET_ADMIN); Require skips a test with the reason when that is missing.
// Everything made is removed in t.Cleanup, also when the test fails.
package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/ethtool"
	"github.com/cnperf/cnperf/internal/nsthread"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "cnpt-"

// Require skips t unless the process can make network namespaces.
func Require(t testing.TB) {
	t.Helper()
	if reason := Unavailable(); reason != "" {
		t.Skipf("skipping: %s", reason)
	}
}

// Unavailable says why namespaces cannot be made here, or "" when they can.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "needs root to create network namespaces (run as root, as CI does)"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "kernel has no network namespaces"
	}
	return ""
}

// NS is a named network namespace.
type NS struct {
	Name   string
	handle netns.NsHandle
}

// Path returns the namespace's bind-mount path.
func (n *NS) Path() string { return "/var/run/netns/" + n.Name }

// Do runs fn on a locked thread switched into n (nsthread.Do). fn must
// not start goroutines that expect to be in n. Sockets fn opens stay in n.
// fn must not call t.Fatal (FailNow ends only fn's goroutine): if it does,
// Do returns an error saying so instead of waiting forever, and the thread,
// still in n, is retired by the runtime.
func (n *NS) Do(fn func() error) error {
	return nsthread.Do(n.handle, n.Name, fn)
}

// WaitAddr waits up to 5 s until a can be bound in n: a new IPv6 address
// stays tentative, and unusable, while duplicate address detection runs.
func (n *NS) WaitAddr(t testing.TB, a netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := n.Do(func() error {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("address %s in netns %s not usable: %v", a, n.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// carryBound bounds the wait for a new link to carry traffic.
const carryBound = 30 * time.Second

// waitCarry returns when n's device dev is operationally up. The kernel
// turns a new link's operational state and transmit queue on
// asynchronously (its link watcher, up to a second later, more on a busy
// machine) and drops what is sent there until then; asking the link
// whether it has a link (ethtool.Link) settles that at once.
func (n *NS) waitCarry(dev string) error {
	deadline := time.Now().Add(carryBound)
	for {
		var state netlink.LinkOperState
		err := n.Do(func() error {
			_, _ = ethtool.Link(dev) // settles; the state below decides
			l, err := netlink.LinkByName(dev)
			if err == nil {
				state = l.Attrs().OperState
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("link %s in %s: %w", dev, n.Name, err)
		}
		if state == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link %s in %s is %v after %v, want up", dev, n.Name, state, carryBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start starts cmd inside n (the child inherits the namespace of the
// thread that forks it).
func (n *NS) Start(cmd *exec.Cmd) error {
	return n.Do(cmd.Start)
}

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	A, B         *NS
	AddrA, AddrB netip.Addr // IPv4 addresses of A's and B's ends
	Addr6A       netip.Addr // IPv6 (ULA) addresses
	Addr6B       netip.Addr
}

// NewPair makes two namespaces joined by a veth (A: 198.18.0.1/24,
// fd63:6e70::1/64; B: .2 and ::2), loopback up in both. It skips t without
// root. The namespaces are deleted in t.Cleanup.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	return makeForTest(t, "namespace pair", MakePair)
}

// makeForTest runs build for t: it skips t without root, registers the
// cleanup build returns (also when build failed half way) and fails t with
// what went wrong.
func makeForTest[T any](t testing.TB, what string, build func() (T, func() error, error)) T {
	t.Helper()
	Require(t)
	v, cleanup, err := build()
	t.Cleanup(func() {
		if err := cleanup(); err != nil {
			t.Errorf("nettest cleanup: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("make %s: %v", what, err)
	}
	return v
}

// MakePair is NewPair for programs (benchmarks): it returns a cleanup to
// call whatever happens, also when err is not nil.
func MakePair() (*Pair, func() error, error) {
	suffix := randomSuffix()
	var made []*NS
	cleanup := func() error {
		var errs []error
		for _, n := range made {
			errs = append(errs, Delete(n))
		}
		return errors.Join(errs...)
	}
	a, err := NewNS(Prefix + suffix + "-a")
	if err != nil {
		return nil, cleanup, err
	}
	made = append(made, a)
	b, err := NewNS(Prefix + suffix + "-b")
	if err != nil {
		return nil, cleanup, err
	}
	made = append(made, b)
	p := &Pair{A: a, B: b,
		AddrA: netip.MustParseAddr("198.18.0.1"), AddrB: netip.MustParseAddr("198.18.0.2"),
		Addr6A: netip.MustParseAddr("fd63:6e70::1"), Addr6B: netip.MustParseAddr("fd63:6e70::2")}
	if err := p.link(); err != nil {
		return nil, cleanup, err
	}
	if err := errors.Join(p.A.waitCarry("eth0"), p.B.waitCarry("eth0")); err != nil {
		return nil, cleanup, err
	}
	return p, cleanup, nil
}

func (p *Pair) link() error {
	ha, err := netlink.NewHandleAt(p.A.handle)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", p.A.Name, err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(p.B.handle)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", p.B.Name, err)
	}
	defer hb.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "eth0b",
		PeerNamespace: netlink.NsFd(int(p.B.handle))}
	if err := ha.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth in %s: %w", p.A.Name, err)
	}
	// Rename B's end to eth0 too, so both sides look alike.
	lb, err := hb.LinkByName("eth0b")
	if err != nil {
		return fmt.Errorf("find veth peer in %s: %w", p.B.Name, err)
	}
	if err := hb.LinkSetName(lb, "eth0"); err != nil {
		return fmt.Errorf("rename veth peer: %w", err)
	}
	for _, side := range []struct {
		h      *netlink.Handle
		v4, v6 netip.Addr
	}{{ha, p.AddrA, p.Addr6A}, {hb, p.AddrB, p.Addr6B}} {
		l, err := side.h.LinkByName("eth0")
		if err != nil {
			return fmt.Errorf("find eth0: %w", err)
		}
		for _, a := range []string{side.v4.String() + "/24", side.v6.String() + "/64"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			addr.Flags = unix.IFA_F_NODAD // usable at once, no duplicate-address wait
			if err := side.h.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set eth0 up: %w", err)
		}
		lo, err := side.h.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo: %w", err)
		}
		if err := side.h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	return nil
}

// NewNS makes a named namespace without moving the caller into it.
func NewNS(name string) (*NS, error) {
	h, err := nsthread.Create(name, nil)
	if err != nil {
		return nil, err
	}
	return &NS{Name: name, handle: h}, nil
}

// Delete removes a namespace made by NewNS (its devices go with it).
func Delete(n *NS) error {
	if n == nil {
		return nil
	}
	_ = n.handle.Close()
	if err := netns.DeleteNamed(n.Name); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("delete netns %s: %w", n.Name, err)
	}
	return nil
}

// Leftovers lists namespaces named with Prefix, for tests that check
// nothing was left behind.
func Leftovers() []string {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// HostPort joins an address and port for dialing.
func HostPort(a netip.Addr, port int) string {
	return net.JoinHostPort(a.String(), fmt.Sprint(port))
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
