package nettest

import (
	"net"
	"testing"
	"time"
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
