package lab

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPolicyRules(t *testing.T) {
	got := policyRules("CNPERF-NP-n1-p1", "10.244.1.2", "10.244.2.2", Policies{Count: 3, Selecting: 1, Port: 5201})
	for _, want := range []string{
		"-A CNPERF-NP-n1-p1 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n",
		"-A CNPERF-NP-n1-p1 -s 192.0.2.2/32 -d 198.51.100.1/32 -p tcp --dport 1025 -j ACCEPT\n",
		"-A CNPERF-NP-n1-p1 -s 10.244.2.2/32 -p tcp --dport 5201 -j ACCEPT\n",
		"-A CNPERF-NP-n1-p1 -j DROP\n",
		"-I FORWARD 1 -d 10.244.1.2/32 -j CNPERF-NP-n1-p1\nCOMMIT\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rules lack %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "-j ACCEPT"); n != 4 {
		t.Errorf("%d ACCEPT rules, want established and 3 policies", n)
	}
	if other := policyRules("C", "10.244.1.2", "", Policies{Count: 2}); !strings.Contains(other, "-A C -j RETURN") || strings.Contains(other, "DROP") {
		t.Errorf("policies selecting no pod must not drop:\n%s", other)
	}
	if _, err := policyChain(strings.Repeat("p", 30)); err == nil {
		t.Error("a chain name over 28 characters was accepted")
	}
}

// TestPolicies: a deny policy for n1-p1 (replacing one that selects no
// pod) refuses new connections from n2-p1 but keeps one made before
// (established flows are accepted first);
// 100 policies of which one allows n2-p1 let it connect; each undo
// leaves no rule behind.
func TestPolicies(t *testing.T) {
	if _, err := iptablesPath(); err != nil {
		t.Skip(err)
	}
	l := upLab(t, Config{Nodes: 2, PodsPerNode: 1, Backend: BackendHostGW})
	dst, _ := l.Pod("n1-p1")
	src, _ := l.Pod("n2-p1")
	var ln net.Listener
	if err := Do(dst.NS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst.IP.Addr().String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// A connection the rules allow gets a busy machine's time; one they
	// refuse is given half a second (its SYNs are dropped, so it waits
	// whatever it is given).
	const allowed, refused = 10 * time.Second, 500 * time.Millisecond
	dial := func(timeout time.Duration) (net.Conn, error) {
		var c net.Conn
		err := Do(src.NS, func() (err error) {
			c, err = net.DialTimeout("tcp", ln.Addr().String(), timeout)
			return err
		})
		return c, err
	}
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_, err := c.Read(make([]byte, 1))
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Conntrack follows a namespace's flows only once a rule needs it (as
	// on a node whose CNI has rules from the start): a policy that selects
	// no pod first.
	if _, err := l.AddPolicies(ctx, dst.Name, Policies{Count: 1}); err != nil {
		t.Fatal(err)
	}
	old, err := dial(allowed)
	if err != nil {
		t.Fatalf("before any policy: %v", err)
	}
	defer old.Close()

	undo, err := l.AddPolicies(ctx, dst.Name, Policies{Count: 10, Deny: true})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := dial(refused); err == nil {
		c.Close()
		t.Error("a new connection passed a deny policy")
	}
	if err := echo(old); err != nil {
		t.Errorf("the connection made before the deny was cut: %v", err)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := l.PolicyChainRules(ctx, dst.Name); err != nil || n != 0 {
		t.Errorf("after the undo: %d rules (%v), want none", n, err)
	}

	undo, err = l.AddPolicies(ctx, dst.Name, Policies{Count: 100, Selecting: 1, From: src.Name, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.PolicyChainRules(ctx, dst.Name); err != nil || n != 103 {
		t.Errorf("%d rules (%v), want 103: established, 100 policies, drop, the jump", n, err)
	}
	c, err := dial(allowed)
	if err != nil {
		t.Errorf("a policy allowing n2-p1 refused it: %v", err)
	} else {
		c.Close()
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := l.PolicyChainRules(ctx, dst.Name); err != nil || n != 0 {
		t.Errorf("after the undo: %d rules (%v), want none", n, err)
	}
}
