//go:build capture

package external

// This file regenerates testdata/ from the real tools. It is not part of the
// normal test run; run it as root with
//
//	go test -tags capture -run TestCapture -count=1 ./internal/probe/external
//
// It runs every command itself (no shell) on loopback and across a veth pair
// between two namespaces, and a three-namespace path A - R - B with a router
// for traceroute.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cnperf/cnperf/internal/nettest"
)

// capRun runs argv (in ns when not nil) and returns stdout+stderr.
func capRun(t *testing.T, ns *nettest.NS, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	var err error
	if ns != nil {
		err = ns.Start(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	err = cmd.Wait()
	t.Logf("%v: exit %v", argv, err)
	return out.String()
}

// capServer starts a server (in ns when not nil), writing its output to a
// buffer, and waits until probe succeeds.
type capSrv struct {
	cmd *exec.Cmd
	out *syncBuf
}

func capServer(t *testing.T, ns *nettest.NS, ready func(pid int, out string) bool, argv ...string) *capSrv {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	out := &syncBuf{}
	cmd.Stdout = out
	cmd.Stderr = out
	var err error
	if ns != nil {
		err = ns.Start(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for !ready(cmd.Process.Pid, out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("server %v not ready: %s", argv, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &capSrv{cmd: cmd, out: out}
}

func (s *capSrv) stop() string {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	return s.out.String()
}

func tcpReady(_ *nettest.NS, port int) func(int, string) bool {
	return func(pid int, _ string) bool {
		ok, _ := bound(pid, "tcp", port)
		return ok
	}
}

func lineReady(s string) func(int, string) bool {
	return func(_ int, out string) bool { return strings.Contains(out, s) }
}

func save(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("testdata", name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", name, len(content))
}

func TestCaptureLoopback(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"iperf3_tcp_lo.json", []string{"-t", "2"}},
		{"iperf3_udp_lo.json", []string{"-u", "-b", "100M", "-t", "2"}},
		{"iperf3_tcp_reverse_lo.json", []string{"-R", "-t", "2"}},
		{"iperf3_udp_reverse_lo.json", []string{"-u", "-b", "50M", "-R", "-t", "2"}},
		{"iperf3_tcp_parallel_lo.json", []string{"-P", "2", "-t", "2"}},
	}
	for i, c := range cases {
		port := fmt.Sprint(15301 + i)
		srv := capServer(t, nil, tcpReady(nil, 15301+i), "iperf3", "-s", "-1", "-p", port)
		out := capRun(t, nil, append([]string{"iperf3", "-c", "127.0.0.1", "-p", port, "--json"}, c.args...)...)
		srv.stop()
		save(t, c.name, out)
	}
	// A refused connection: iperf3 still writes JSON with an error field.
	save(t, "iperf3_refused_lo.json", capRun(t, nil, "iperf3", "-c", "127.0.0.1", "-p", "15399", "--json", "-t", "1"))

	srv := capServer(t, nil, tcpReady(nil, 15401), "iperf", "-s", "-e", "-p", "15401")
	save(t, "iperf2_tcp_lo_client.txt", capRun(t, nil, "iperf", "-c", "127.0.0.1", "-p", "15401", "-e", "-t", "2", "-i", "1"))
	save(t, "iperf2_tcp_lo_server.txt", srv.stop())

	srv = capServer(t, nil, lineReady("Server listening"), "iperf", "-s", "-u", "-e", "-i", "1", "--udp-histogram=5u,200", "-p", "15402")
	save(t, "iperf2_udp_lo_client.txt", capRun(t, nil, "iperf", "-c", "127.0.0.1", "-p", "15402", "-u", "-e", "--trip-times", "-b", "20M", "-t", "2", "-i", "1"))
	save(t, "iperf2_udp_lo_server.txt", srv.stop())

	// The seed's own parameters: -i 1 -f M.
	srv = capServer(t, nil, tcpReady(nil, 15403), "iperf", "-s", "-p", "15403")
	save(t, "iperf2_tcp_fM_lo_client.txt", capRun(t, nil, "iperf", "-c", "127.0.0.1", "-p", "15403", "-e", "-i", "1", "-f", "M", "-t", "2"))
	srv.stop()

	// Overload loopback so the server sees loss (and maybe reordering).
	srv = capServer(t, nil, lineReady("Server listening"), "iperf", "-s", "-u", "-e", "-i", "1", "--udp-histogram=100u,50", "-p", "15404")
	save(t, "iperf2_udp_loss_lo_client.txt", capRun(t, nil, "iperf", "-c", "127.0.0.1", "-p", "15404", "-u", "-e", "--trip-times", "-b", "5G", "-l", "1400", "-t", "2", "-i", "1"))
	save(t, "iperf2_udp_loss_lo_server.txt", srv.stop())

	save(t, "ping_lo.txt", capRun(t, nil, "ping", "-n", "-c", "5", "-i", "0.2", "127.0.0.1"))
	save(t, "traceroute_lo.txt", capRun(t, nil, "traceroute", "-n", "127.0.0.1"))
}

func TestCaptureVeth(t *testing.T) {
	p := nettest.NewPair(t)
	b := p.AddrB.String()

	srv := capServer(t, p.B, tcpReady(p.B, 5201), "iperf3", "-s", "-1", "-B", b, "-p", "5201")
	save(t, "iperf3_tcp_veth.json", capRun(t, p.A, "iperf3", "-c", b, "-p", "5201", "--json", "-t", "2"))
	srv.stop()
	srv = capServer(t, p.B, tcpReady(p.B, 5201), "iperf3", "-s", "-1", "-B", b, "-p", "5201")
	save(t, "iperf3_udp_veth.json", capRun(t, p.A, "iperf3", "-c", b, "-p", "5201", "--json", "-u", "-b", "200M", "-l", "1400", "-t", "2"))
	srv.stop()

	srv = capServer(t, p.B, tcpReady(p.B, 5001), "iperf", "-s", "-e", "-B", b, "-p", "5001")
	save(t, "iperf2_tcp_veth_client.txt", capRun(t, p.A, "iperf", "-c", b, "-p", "5001", "-e", "-t", "2", "-i", "1"))
	save(t, "iperf2_tcp_veth_server.txt", srv.stop())

	srv = capServer(t, p.B, lineReady("Server listening"), "iperf", "-s", "-u", "-e", "-i", "1", "--udp-histogram=10u,100", "-B", b, "-p", "5001")
	save(t, "iperf2_udp_veth_client.txt", capRun(t, p.A, "iperf", "-c", b, "-p", "5001", "-u", "-e", "--trip-times", "-b", "100M", "-l", "1400", "-t", "2", "-i", "1", "-S", "0x10"))
	save(t, "iperf2_udp_veth_server.txt", srv.stop())

	save(t, "ping_veth.txt", capRun(t, p.A, "ping", "-n", "-c", "10", "-i", "0.2", b))
	// An unused address on the link: ARP gets no answer, every echo is lost.
	save(t, "ping_loss_veth.txt", capRun(t, p.A, "ping", "-n", "-c", "3", "-i", "0.5", "-W", "1", "198.18.0.99"))
	// An address with no route at all.
	save(t, "ping_noroute_veth.txt", capRun(t, p.A, "ping", "-n", "-c", "2", "-W", "1", "198.51.100.1"))
	save(t, "traceroute_veth.txt", capRun(t, p.A, "traceroute", "-n", b))
}

// TestCaptureRouted builds A - R - B (two /24s, R forwarding) and traces
// through R, to B and to an address beyond B's link nobody answers for.
func TestCaptureRouted(t *testing.T) {
	nettest.Require(t)
	var made []*nettest.NS
	t.Cleanup(func() {
		for _, n := range made {
			if err := nettest.Delete(n); err != nil {
				t.Error(err)
			}
		}
	})
	mk := func(suffix string) *nettest.NS {
		n, err := nettest.NewNS(fmt.Sprintf("%scap%d-%s", nettest.Prefix, os.Getpid(), suffix))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, n)
		return n
	}
	a, r, b := mk("a"), mk("r"), mk("b")
	handle := func(n *nettest.NS) *netlink.Handle {
		ns, err := netns.GetFromName(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	ha, hr, hb := handle(a), handle(r), handle(b)
	nsfd := func(n *nettest.NS) netlink.NsFd {
		ns, err := netns.GetFromName(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return netlink.NsFd(int(ns))
	}
	link := func(h *netlink.Handle, name, peer string, peerNS netlink.NsFd) {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer, PeerNamespace: peerNS}); err != nil {
			t.Fatal(err)
		}
	}
	link(ha, "ra", "ar", nsfd(r))
	link(hb, "rb", "br", nsfd(r))
	conf := func(h *netlink.Handle, dev, cidr, gw string) {
		l, err := h.LinkByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr(cidr)
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		lo, _ := h.LinkByName("lo")
		_ = h.LinkSetUp(lo)
		if gw != "" {
			gwa := netip.MustParseAddr(gw)
			if err := h.RouteAdd(&netlink.Route{Dst: nil, Gw: gwa.AsSlice(), LinkIndex: l.Attrs().Index}); err != nil {
				t.Fatal(err)
			}
		}
	}
	conf(ha, "ra", "198.18.1.1/24", "198.18.1.254")
	conf(hr, "ar", "198.18.1.254/24", "")
	conf(hr, "br", "198.18.2.254/24", "")
	conf(hb, "rb", "198.18.2.1/24", "198.18.2.254")
	if err := r.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	save(t, "traceroute_routed.txt", capRun(t, a, "traceroute", "-n", "198.18.2.1"))
	save(t, "traceroute_icmp_routed.txt", capRun(t, a, "traceroute", "-n", "-I", "-q", "2", "198.18.2.1"))
	save(t, "traceroute_unreach_routed.txt", capRun(t, a, "traceroute", "-n", "-m", "4", "-w", "0.5", "-q", "2", "198.18.2.77"))
	save(t, "ping_routed.txt", capRun(t, a, "ping", "-n", "-c", "5", "-i", "0.2", "198.18.2.1"))
}

// syncBuf is a buffer safe for a process writing while the test reads.
type syncBuf struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
