package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/nettest"
)

// Test labs are named "lt" plus random hex, apart from users' labs.
func testName(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "lt" + hex.EncodeToString(b[:])
}

// assertGone fails t if anything of the lab is left.
func assertGone(t *testing.T, name, stateDir string) {
	t.Helper()
	if left := leftoverNamespaces(name); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if _, err := os.Stat(stateFile(stateDir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left behind (stat: %v)", err)
	}
}

// ensureDown registers a cleanup that removes the lab whatever happened
// and checks nothing is left.
func ensureDown(t *testing.T, name, stateDir string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := Down(ctx, name, stateDir, nil); err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("cleanup down: %v", err)
		}
		assertGone(t, name, stateDir)
	})
}

// upLab builds a lab for t and removes it in t.Cleanup.
func upLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	nettest.Require(t)
	if cfg.Name == "" {
		cfg.Name = testName(t)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	ensureDown(t, cfg.Name, cfg.StateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Up(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return l
}

func TestValidate(t *testing.T) {
	pre := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	cases := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" means valid
	}{
		{"defaults", Config{Nodes: 2, PodsPerNode: 2}, ""},
		{"vxlan with tos", Config{Nodes: 1, Backend: "vxlan", VXLANInheritTOS: true}, ""},
		{"zero nodes", Config{Nodes: 0}, "at least 1 node"},
		{"negative pods", Config{Nodes: 1, PodsPerNode: -1}, "must not be negative"},
		{"too many pods", Config{Nodes: 1, PodsPerNode: 254}, "at most 253"},
		{"unknown backend", Config{Nodes: 1, Backend: "flannel"}, `unknown backend "flannel"`},
		{"bad name", Config{Name: "My-Lab", Nodes: 1}, "lowercase letters and digits"},
		{"long name", Config{Name: "abcdefghijklm", Nodes: 1}, "at most 12"},
		{"tos on host-gw", Config{Nodes: 1, VXLANInheritTOS: true}, "needs the vxlan backend"},
		{"mtu low", Config{Nodes: 1, MTU: 1000}, "mtu 1000"},
		{"mtu high", Config{Nodes: 1, MTU: 9001}, "mtu 9001"},
		{"rate low", Config{Nodes: 1, UnderlayRateBps: 1000}, "underlay rate 1000"},
		{"overlapping cidrs", Config{Nodes: 1, PodCIDR: pre("10.0.0.0/8"), UnderlayCIDR: pre("10.170.0.0/24")}, "overlaps underlay CIDR"},
		{"same cidrs", Config{Nodes: 1, PodCIDR: pre("10.170.0.0/16"), UnderlayCIDR: pre("10.170.0.0/16")}, "overlaps"},
		{"pod cidr too small", Config{Nodes: 4, PodCIDR: pre("10.244.0.0/22")}, "too small for 4 nodes"},
		{"underlay too small", Config{Nodes: 10, UnderlayCIDR: pre("10.170.0.0/28")}, "at most 4 nodes"},
		{"ipv6 cidr", Config{Nodes: 1, PodCIDR: pre("fd00::/48")}, "must be IPv4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate: nil, want error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate: %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPlanAddresses(t *testing.T) {
	l := plan(Config{Name: "x", Nodes: 3, PodsPerNode: 2, Backend: BackendVXLAN, MTU: 1500}.withDefaults())
	if got, want := len(l.Namespaces), 1+3+6; got != want {
		t.Fatalf("namespaces %d, want %d", got, want)
	}
	n3 := l.Nodes[2]
	if n3.IP.String() != "10.170.0.13/24" || n3.PodCIDR.String() != "10.244.3.0/24" || n3.Gateway.String() != "10.244.3.1" {
		t.Errorf("node 3: %+v", n3)
	}
	if n3.VTEP == nil || n3.VTEP.Addr.String() != "10.244.3.0" || n3.VTEP.MTU != 1450 {
		t.Errorf("node 3 vtep: %+v", n3.VTEP)
	}
	p := l.Pods[5]
	if p.Name != "n3-p2" || p.IP.String() != "10.244.3.3/24" || p.NS != "cnl-x-n3-p2" || p.MTU != 1450 {
		t.Errorf("pod: %+v", p)
	}
	if l.Underlay.ServerAddr != "10.170.0.1:8080" || l.Underlay.NS != "cnl-x-underlay" {
		t.Errorf("underlay: %+v", l.Underlay)
	}
	for _, n := range l.Namespaces {
		if !strings.HasPrefix(n, Prefix("x")) {
			t.Errorf("namespace %s lacks the prefix", n)
		}
	}
}

func TestTBFParams(t *testing.T) {
	cases := []struct {
		rate         uint64
		burst, limit uint32
	}{
		{1e9, 125000, 125000 + 3125000},
		{10e9, 1250000, 1250000 + 31250000},
		{100e6, 64 << 10, 64<<10 + 312500},
	}
	for _, tc := range cases {
		b, l := tbfParams(tc.rate)
		if b != tc.burst || l != tc.limit {
			t.Errorf("tbfParams(%d) = %d, %d; want %d, %d", tc.rate, b, l, tc.burst, tc.limit)
		}
	}
}

// TestBadInputLeavesNothing: errors found before or while building leave
// no namespace and no state file.
func TestBadInputLeavesNothing(t *testing.T) {
	nettest.Require(t)
	cases := []struct {
		name string
		cfg  Config
		want []string // one of these must be in the error
	}{
		{"zero nodes", Config{Nodes: 0}, []string{"at least 1 node"}},
		{"unknown backend", Config{Nodes: 1, Backend: "calico"}, []string{"unknown backend"}},
		{"ipip", Config{Nodes: 1, Backend: "ipip"}, []string{"kernel lacks ipip", "does not build"}},
		{"geneve", Config{Nodes: 1, Backend: "geneve"}, []string{"kernel lacks geneve", "does not build"}},
		{"wireguard", Config{Nodes: 1, Backend: "wireguard"}, []string{"kernel lacks wireguard", "does not build"}},
		{"overlap", Config{Nodes: 1, PodCIDR: netip.MustParsePrefix("10.170.0.0/16")}, []string{"overlaps"}},
		{"fails at underlay", Config{Nodes: 2, PodsPerNode: 1, failAt: "underlay"}, []string{"injected failure"}},
		{"fails after nodes", Config{Nodes: 3, PodsPerNode: 2, Backend: BackendVXLAN, failAt: "node"}, []string{"injected failure"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Name, cfg.StateDir = testName(t), t.TempDir()
			ensureDown(t, cfg.Name, cfg.StateDir)
			_, err := Up(context.Background(), cfg, nil)
			if err == nil {
				t.Fatal("Up succeeded, want an error")
			}
			ok := false
			for _, w := range tc.want {
				ok = ok || strings.Contains(err.Error(), w)
			}
			if !ok {
				t.Fatalf("error %q, want one of %q", err, tc.want)
			}
			t.Logf("error: %v", err)
			assertGone(t, cfg.Name, cfg.StateDir)
		})
	}
}

func TestNameInUse(t *testing.T) {
	l := upLab(t, Config{Nodes: 1, PodsPerNode: 1})
	_, err := Up(context.Background(), Config{Name: l.Name, Nodes: 1, StateDir: l.stateDir}, nil)
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second Up with the same name: %v, want 'already exists'", err)
	}
	if st := l.Status(); !st.Healthy {
		t.Fatalf("first lab damaged by the refused Up: %+v", st)
	}
}

// startEcho serves UDP echo on addr:7 in a namespace (bound to the
// address, so replies come from it and not from the routed source).
func startEcho(t *testing.T, nsName string, addr netip.Addr) {
	t.Helper()
	var c *net.UDPConn
	err := Do(nsName, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 7)))
		return err
	})
	if err != nil {
		t.Fatalf("echo in %s: %v", nsName, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
}

// udpClient opens a UDP socket inside a namespace.
func udpClient(t *testing.T, nsName string, tos int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := Do(nsName, func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{})
		if err != nil || tos == 0 {
			return err
		}
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos) }); err != nil {
			return err
		}
		return serr
	})
	if err != nil {
		t.Fatalf("udp socket in %s: %v", nsName, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends a datagram to dst:7 and waits for the echo from dst.
func exchange(c *net.UDPConn, dst netip.Addr) error {
	msg := []byte("cnperf-lab-" + dst.String())
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ {
		if _, err := c.WriteToUDPAddrPort(msg, netip.AddrPortFrom(dst, 7)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // timeout: send again
			}
			if from.Addr() == dst && bytes.Equal(buf[:n], msg) {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo from %s", dst)
}

func linkMTU(t *testing.T, nsName, dev string) int {
	t.Helper()
	h, err := openNS(nsName)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	l, err := h.nl.LinkByName(dev)
	if err != nil {
		t.Fatalf("%s in %s: %v", dev, nsName, err)
	}
	return l.Attrs().MTU
}

// TestReachability: every pod and node reaches every pod, every node and
// the underlay's server address, on both backends; MTUs are right; Down
// leaves nothing.
func TestReachability(t *testing.T) {
	cases := []struct {
		backend      string
		mtu, wantPod int
		wantVTEP     int
		podsPerNode  int
		nodes        int
		underlayRate uint64
		wantTBFBytes uint64
	}{
		{backend: BackendHostGW, mtu: 1500, wantPod: 1500, nodes: 3, podsPerNode: 2},
		{backend: BackendVXLAN, mtu: 1500, wantPod: 1450, wantVTEP: 1450, nodes: 3, podsPerNode: 2},
		{backend: BackendVXLAN, mtu: 9000, wantPod: 8950, wantVTEP: 8950, nodes: 2, podsPerNode: 1, underlayRate: 1e9, wantTBFBytes: 125e6},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-mtu%d", tc.backend, tc.mtu), func(t *testing.T) {
			l := upLab(t, Config{Nodes: tc.nodes, PodsPerNode: tc.podsPerNode, Backend: tc.backend, MTU: tc.mtu, UnderlayRateBps: tc.underlayRate})
			type member struct {
				name, ns string
				addr     netip.Addr
			}
			var members []member
			var dsts []netip.Addr
			for _, p := range l.Pods {
				members = append(members, member{p.Name, p.NS, p.IP.Addr()})
				dsts = append(dsts, p.IP.Addr())
				if got := linkMTU(t, p.NS, podDev); got != tc.wantPod {
					t.Errorf("%s eth0 mtu %d, want %d", p.Name, got, tc.wantPod)
				}
			}
			for _, n := range l.Nodes {
				members = append(members, member{n.Name, n.NS, n.IP.Addr()})
				dsts = append(dsts, n.IP.Addr())
				if tc.wantVTEP != 0 {
					if got := linkMTU(t, n.NS, vtepDev); got != tc.wantVTEP {
						t.Errorf("%s %s mtu %d, want %d", n.Name, vtepDev, got, tc.wantVTEP)
					}
				}
				if got := linkMTU(t, n.NS, nodeUplink); got != tc.mtu {
					t.Errorf("%s uplink mtu %d, want %d", n.Name, got, tc.mtu)
				}
				if tc.wantTBFBytes != 0 {
					checkTBF(t, n.NS, tc.wantTBFBytes)
				}
			}
			dsts = append(dsts, l.Underlay.Addr.Addr())
			for _, m := range members {
				startEcho(t, m.ns, m.addr)
			}
			startEcho(t, l.Underlay.NS, l.Underlay.Addr.Addr())
			for _, m := range members {
				c := udpClient(t, m.ns, 0)
				for _, d := range dsts {
					if err := exchange(c, d); err != nil {
						t.Errorf("%s -> %s: %v", m.name, d, err)
					}
				}
			}
			t.Logf("%d sources x %d destinations exchanged UDP echoes", len(members), len(dsts))
			if _, err := l.Down(context.Background()); err != nil {
				t.Fatalf("down: %v", err)
			}
			assertGone(t, l.Name, l.stateDir)
		})
	}
}

func checkTBF(t *testing.T, nsName string, wantBytesPerSec uint64) {
	t.Helper()
	h, err := openNS(nsName)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	link, err := h.nl.LinkByName(nodeUplink)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.nl.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if tbf, ok := q.(*netlink.Tbf); ok {
			if tbf.Rate != wantBytesPerSec {
				t.Errorf("tbf rate %d B/s, want %d", tbf.Rate, wantBytesPerSec)
			}
			return
		}
	}
	t.Errorf("no tbf on %s in %s: %v", nodeUplink, nsName, qs)
}

// captured is what the underlay saw of one IPv4 packet.
type captured struct {
	tos      byte
	src, dst netip.Addr
	dport    uint16
	inner    *captured // the encapsulated packet of a VXLAN datagram
}

func (c *captured) String() string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s -> %s udp/%d tos %#x", c.src, c.dst, c.dport, c.tos)
}

func parseIPv4(b []byte) (*captured, []byte, bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return nil, nil, false
	}
	ihl := int(b[0]&0x0f) * 4
	if len(b) < ihl+8 || b[9] != unix.IPPROTO_UDP {
		return nil, nil, false
	}
	c := &captured{tos: b[1], src: netip.AddrFrom4([4]byte(b[12:16])), dst: netip.AddrFrom4([4]byte(b[16:20])),
		dport: binary.BigEndian.Uint16(b[ihl+2 : ihl+4])}
	return c, b[ihl+8:], true
}

// capture reads IPv4 packets seen in the underlay namespace until match
// says stop or the deadline passes, sending with send every 100 ms.
func capture(t *testing.T, underNS string, send func(), match func(*captured) bool) *captured {
	t.Helper()
	var fd int
	err := Do(underNS, func() (err error) {
		// ETH_P_ALL: taps see frames before the bridge consumes them;
		// protocol-specific packet sockets would not.
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL)))
		return err
	})
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		send()
		until := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(until) {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Protocol != htons(unix.ETH_P_IP) {
				continue
			}
			c, payload, ok := parseIPv4(buf[:n])
			if !ok {
				continue
			}
			if c.dport == VXLANPort && len(payload) >= 8+14 {
				c.inner, _, _ = parseIPv4(payload[8+14:])
			}
			if match(c) {
				return c
			}
		}
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestUnderlaySees: on vxlan the underlay carries pod traffic as UDP to
// port 8472 between node IPs (with the inner TOS copied only with tos
// inherit); on host-gw it carries the pod packets themselves.
func TestUnderlaySees(t *testing.T) {
	const tos = 0xb8 // EF
	cases := []struct {
		name     string
		cfg      Config
		encap    bool
		outerTOS byte
	}{
		{"vxlan", Config{Backend: BackendVXLAN}, true, 0},
		{"vxlan-tos-inherit", Config{Backend: BackendVXLAN, VXLANInheritTOS: true}, true, tos},
		{"host-gw", Config{Backend: BackendHostGW}, false, tos},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Nodes, cfg.PodsPerNode = 2, 1
			l := upLab(t, cfg)
			src, _ := l.Pod("n1-p1")
			dst, _ := l.Pod("n2-p1")
			n1, _ := l.Node("n1")
			n2, _ := l.Node("n2")
			c := udpClient(t, src.NS, tos)
			send := func() {
				_, _ = c.WriteToUDPAddrPort([]byte("probe"), netip.AddrPortFrom(dst.IP.Addr(), 9))
			}
			got := capture(t, l.Underlay.NS, send, func(p *captured) bool {
				if tc.encap {
					return p.dport == VXLANPort && p.inner != nil && p.inner.dst == dst.IP.Addr() && p.inner.dport == 9
				}
				return p.dst == dst.IP.Addr() && p.dport == 9
			})
			if got == nil {
				t.Fatalf("underlay never saw the pod's datagram (encapsulated: %v)", tc.encap)
			}
			if tc.encap {
				if got.src != n1.IP.Addr() || got.dst != n2.IP.Addr() {
					t.Errorf("outer %s -> %s, want %s -> %s", got.src, got.dst, n1.IP.Addr(), n2.IP.Addr())
				}
				if got.inner.tos != tos {
					t.Errorf("inner tos %#x, want %#x", got.inner.tos, tos)
				}
			}
			if got.tos != tc.outerTOS {
				t.Errorf("tos on the underlay %#x, want %#x", got.tos, tc.outerTOS)
			}
			t.Logf("underlay saw %s (inner: %s)", got, got.inner)
		})
	}
}

func TestTwoLabsCoexist(t *testing.T) {
	a := upLab(t, Config{Nodes: 2, PodsPerNode: 1})
	b := upLab(t, Config{Nodes: 2, PodsPerNode: 1, Backend: BackendVXLAN})
	for _, l := range []*Lab{a, b} {
		if st := l.Status(); !st.Healthy || len(st.Leftovers) > 0 {
			t.Fatalf("lab %s: healthy %v, leftovers %v", l.Name, st.Healthy, st.Leftovers)
		}
	}
	if _, err := a.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertGone(t, a.Name, a.stateDir)
	// b still works after a is gone.
	src, _ := b.Pod("n1-p1")
	dst, _ := b.Pod("n2-p1")
	startEcho(t, dst.NS, dst.IP.Addr())
	if err := exchange(udpClient(t, src.NS, 0), dst.IP.Addr()); err != nil {
		t.Fatalf("lab %s after lab %s went down: %v", b.Name, a.Name, err)
	}
	if st := b.Status(); !st.Healthy {
		t.Fatalf("lab %s not healthy after the other went down", b.Name)
	}
}

func TestExec(t *testing.T) {
	l := upLab(t, Config{Nodes: 1, PodsPerNode: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := []struct {
		target  string
		argv    []string
		want    string // in stdout
		notWant string
		exit    int
	}{
		{"n1-p1", []string{"cat", "/proc/net/dev"}, "eth0", "cni0", 0},
		{"n1", []string{"cat", "/proc/net/dev"}, "cni0", "", 0},
		{"underlay", []string{"cat", "/proc/net/dev"}, "br0", "cni0", 0},
		{"n1-p1", []string{"echo", "$(id)", ";", "true"}, "$(id) ; true", "", 0}, // no shell
		{"n1-p1", []string{"false"}, "", "", 1},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		err := l.Exec(ctx, tc.target, tc.argv, nil, &out, os.Stderr)
		var ee *exec.ExitError
		switch {
		case tc.exit == 0 && err != nil:
			t.Errorf("%s %v: %v", tc.target, tc.argv, err)
		case tc.exit != 0 && (!errors.As(err, &ee) || ee.ExitCode() != tc.exit):
			t.Errorf("%s %v: %v, want exit %d", tc.target, tc.argv, err, tc.exit)
		}
		if !strings.Contains(out.String(), tc.want) || (tc.notWant != "" && strings.Contains(out.String(), tc.notWant)) {
			t.Errorf("%s %v: output %q, want %q and not %q", tc.target, tc.argv, out.String(), tc.want, tc.notWant)
		}
	}
	if err := l.Exec(ctx, "n9-p9", []string{"true"}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "no pod or node") {
		t.Errorf("exec in an unknown pod: %v", err)
	}
}

// Environment of the helper process TestKill9ThenDown starts.
const (
	childEnvName = "CNPERF_LAB_TEST_CHILD_NAME"
	childEnvDir  = "CNPERF_LAB_TEST_CHILD_DIR"
)

// TestHelperChildUp is not a test: run by TestKill9ThenDown as a child, it
// builds a lab, starts a process in a pod, says READY and waits to be
// killed.
func TestHelperChildUp(t *testing.T) {
	name := os.Getenv(childEnvName)
	if name == "" {
		t.Skip("helper process for TestKill9ThenDown")
	}
	l, err := Up(context.Background(), Config{Name: name, Nodes: 2, PodsPerNode: 2, Backend: BackendVXLAN, StateDir: os.Getenv(childEnvDir)}, nil)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	p, _ := l.Pod("n2-p1")
	if _, err := l.StartProcess(p.NS, []string{"sleep", "300"}, nil, filepath.Join(os.Getenv(childEnvDir), "sleep.log")); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	fmt.Println("READY")
	time.Sleep(60 * time.Second) // the parent kills us long before
	os.Exit(3)
}

// TestKill9ThenDown: a process that made a lab and started a process in it
// is killed with SIGKILL; Down then removes everything, with the state
// file and without it (found by prefix, processes by namespace).
func TestKill9ThenDown(t *testing.T) {
	nettest.Require(t)
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1) to stand for a lab process")
	}
	for _, withState := range []bool{true, false} {
		t.Run(fmt.Sprintf("state=%v", withState), func(t *testing.T) {
			name, dir := testName(t), t.TempDir()
			ensureDown(t, name, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperChildUp$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnvName+"="+name, childEnvDir+"="+dir)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ready := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if l := sc.Text(); l == "READY" || strings.HasPrefix(l, "ERROR") {
						ready <- l
						return
					}
				}
				ready <- "EOF"
			}()
			select {
			case l := <-ready:
				if l != "READY" {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("child: %s", l)
				}
			case <-ctx.Done():
				t.Fatal("child never became ready")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			st, err := load(stateFile(dir, name))
			if err != nil {
				t.Fatalf("state after kill -9: %v", err)
			}
			if len(st.Processes) != 1 || !alive(st.Processes[0].PID, st.Processes[0].StartTicks) {
				t.Fatalf("recorded process not alive after the parent's kill -9: %+v", st.Processes)
			}
			pid := st.Processes[0].PID
			if got := len(leftoverNamespaces(name)); got != 7 {
				t.Fatalf("%d namespaces after kill -9, want 7", got)
			}
			if !withState {
				if err := os.Remove(stateFile(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := Down(ctx, name, dir, nil)
			if err != nil {
				t.Fatalf("down: %v", err)
			}
			if alive(pid, st.Processes[0].StartTicks) {
				t.Errorf("process %d survived Down", pid)
			}
			if len(rep.ProcessesKilled) != 1 || rep.ProcessesKilled[0] != pid {
				t.Errorf("down stopped %v, want [%d]", rep.ProcessesKilled, pid)
			}
			if !withState && len(rep.Leftovers) != 7 {
				t.Errorf("down without state reported %d leftovers, want 7", len(rep.Leftovers))
			}
			assertGone(t, name, dir)
			if _, err := Down(ctx, name, dir, nil); !errors.Is(err, ErrNotFound) {
				t.Errorf("second down: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestStartProcess: a process started in the underlay is recorded, shown
// alive by Status, and stopped and reaped by Down.
func TestStartProcess(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1) to stand for a lab process")
	}
	l := upLab(t, Config{Nodes: 1, PodsPerNode: 1})
	if _, err := l.StartProcess("cnl-elsewhere", []string{"sleep", "1"}, nil, ""); err == nil {
		t.Error("StartProcess in a foreign namespace succeeded")
	}
	log := filepath.Join(t.TempDir(), "p.log")
	rec, err := l.StartProcess(l.Underlay.NS, []string{"sleep", "300"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Status(l.Name, l.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) != 1 || !st.Processes[0].Alive || st.Processes[0].PID != rec.PID {
		t.Fatalf("status processes %+v, want pid %d alive", st.Processes, rec.PID)
	}
	// The process runs in the underlay namespace.
	if vs := processesIn([]string{l.Underlay.NS}); len(vs) != 1 || vs[0].pid != rec.PID {
		t.Fatalf("processes in the underlay: %+v, want pid %d", vs, rec.PID)
	}
	rep, err := l.Down(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ProcessesKilled) != 1 || alive(rec.PID, rec.StartTicks) {
		t.Fatalf("down stopped %v; pid %d alive %v", rep.ProcessesKilled, rec.PID, alive(rec.PID, rec.StartTicks))
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", rec.PID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid %d not reaped (stat: %v)", rec.PID, err)
	}
}

// TestFullSizePacketsCross sends datagrams of exactly the pod MTU, with DF
// set, from a pod on one node to a pod on the other and back: on vxlan
// they only arrive when the VTEP and pod MTU leave room for the 50 bytes
// of encapsulation within the underlay's MTU. One byte more must be
// refused by the sending pod itself (EMSGSIZE), not lost on the way.
func TestFullSizePacketsCross(t *testing.T) {
	for _, be := range []string{BackendHostGW, BackendVXLAN} {
		t.Run(be, func(t *testing.T) {
			l := upLab(t, Config{Nodes: 2, PodsPerNode: 1, Backend: be})
			dst, src := l.Pods[0], l.Pods[1]
			startEcho(t, dst.NS, dst.IP.Addr())
			c := udpClient(t, src.NS, 0)
			rc, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}); err != nil || serr != nil {
				t.Fatalf("set DF: %v %v", err, serr)
			}
			to := netip.AddrPortFrom(dst.IP.Addr(), 7)
			full := bytes.Repeat([]byte{0xa5}, src.MTU-28) // IPv4 20 + UDP 8
			buf := make([]byte, 4096)
			got := 0
			for try := 0; try < 3 && got != len(full); try++ {
				if _, err := c.WriteToUDPAddrPort(full, to); err != nil {
					t.Fatalf("send %d bytes: %v", len(full), err)
				}
				_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				got, _, _ = c.ReadFromUDPAddrPort(buf)
			}
			if got != len(full) {
				t.Fatalf("%s: no %d-byte echo (an IP packet of the pod MTU %d) across nodes, got %d bytes", be, len(full), src.MTU, got)
			}
			_, err = c.WriteToUDPAddrPort(append(full, 0), to)
			if !errors.Is(err, unix.EMSGSIZE) {
				t.Errorf("%s: sending one byte over the pod MTU: %v, want EMSGSIZE", be, err)
			}
		})
	}
}

// TestLink checks the links suites put traffic control on.
func TestLink(t *testing.T) {
	l := plan(Config{Name: "lk", Nodes: 2, PodsPerNode: 2}.withDefaults())
	cases := []struct {
		role, member, ns, dev, err string
	}{
		{LinkNodeUplink, "n2", "cnl-lk-n2", "eth0", ""},
		{LinkUnderlayPort, "n2", "cnl-lk-underlay", "n2", ""},
		{LinkPodHost, "n2-p2", "cnl-lk-n2", "veth2", ""},
		{LinkPod, "n1-p1", "cnl-lk-n1-p1", "eth0", ""},
		{LinkNodeUplink, "n3", "", "", "no node"},
		{LinkPod, "n1", "", "", "no pod"},
		{"wan", "n1", "", "", "unknown link role"},
	}
	for _, c := range cases {
		ns, dev, err := l.Link(c.role, c.member)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %s: err %v, want %q", c.role, c.member, err, c.err)
			}
			continue
		}
		if err != nil || ns != c.ns || dev != c.dev {
			t.Errorf("%s %s: %s %s %v, want %s %s", c.role, c.member, ns, dev, err, c.ns, c.dev)
		}
	}
}
