package nettest

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestPairCarriesTrafficAndCleansUp(t *testing.T) {
	Require(t)
	var name string
	t.Run("pair", func(t *testing.T) {
		p := NewPair(t)
		name = p.A.Name
		var ln net.Listener
		if err := p.B.Do(func() (err error) {
			ln, err = net.Listen("tcp", HostPort(p.AddrB, 0))
			return err
		}); err != nil {
			t.Fatalf("listen in B: %v", err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Write([]byte("hi"))
				c.Close()
			}
		}()
		var got string
		if err := p.A.Do(func() error {
			c, err := net.DialTimeout("tcp", HostPort(p.AddrB, port), 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 2)
			_, err = c.Read(b)
			got = string(b)
			return err
		}); err != nil {
			t.Fatalf("dial from A: %v", err)
		}
		if got != "hi" {
			t.Fatalf("got %q, want hi", got)
		}
	})
	for _, l := range Leftovers() {
		if l == name {
			t.Fatalf("namespace %s left behind", name)
		}
	}
}

// TestDoSurvivesGoexit: a function that ends its goroutine (as t.FailNow
// does) makes Do return an error instead of blocking forever.
func TestDoSurvivesGoexit(t *testing.T) {
	Require(t)
	ns, err := NewNS(Prefix + "p-goexit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Delete(ns) })
	done := make(chan error, 1)
	go func() { done <- ns.Do(func() error { runtime.Goexit(); return nil }) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited without returning") {
			t.Fatalf("Do = %v, want an error about the early exit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do blocked after its function called runtime.Goexit")
	}
}

// TestAddressesUsableAtOnce checks that no address of a new pair or chain
// is tentative: they skip duplicate-address detection, so a connection from
// or to an IPv6 address works the moment the namespaces exist.
func TestAddressesUsableAtOnce(t *testing.T) {
	p := NewPair(t)
	c := NewChain(t)
	for _, ns := range []*NS{p.A, p.B, c.A, c.R, c.B} {
		err := ns.Do(func() error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if a.IP.IsGlobalUnicast() && a.Flags&unix.IFA_F_TENTATIVE != 0 {
					return fmt.Errorf("%s is tentative (flags %#x)", a.IPNet, a.Flags)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("netns %s: %v", ns.Name, err)
		}
	}
}

// TestLinksCarryAtOnce: every veth of a new pair and chain is
// operationally up when it is returned. The kernel turns a new link's
// operational state and transmit queue on asynchronously; until then
// what is sent there is dropped (a first SYN waited a second for its
// retransmission). Several, as one may be ready by chance.
func TestLinksCarryAtOnce(t *testing.T) {
	for i := 0; i < 4; i++ {
		p := NewPair(t)
		c := NewChain(t)
		for _, ns := range []*NS{p.A, p.B, c.A, c.R, c.B} {
			err := ns.Do(func() error {
				links, err := netlink.LinkList()
				if err != nil {
					return err
				}
				for _, l := range links {
					if a := l.Attrs(); a.Name != "lo" && a.OperState != netlink.OperUp {
						return fmt.Errorf("%s is %v", a.Name, a.OperState)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("netns %s: %v", ns.Name, err)
			}
		}
	}
}
