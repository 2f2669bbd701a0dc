package udpio

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSendRecv moves numbered datagrams over loopback in every mode pair
// and checks each arrives once, intact, with the TOS that was put on it.
func TestSendRecv(t *testing.T) {
	cases := []struct {
		name     string
		network  string
		addr     string
		send     Options
		recv     Options
		size     int
		count    int
		tos      int
		connect  bool
		wantMode Mode
	}{
		{"gso-gro v4 connected", "udp4", "127.0.0.1:0", Options{}, Options{}, 1400, 500, -1, true, ModeGSO},
		{"gso-gro v4 cmsg tos", "udp4", "127.0.0.1:0", Options{}, Options{}, 1000, 300, 0xb8, false, ModeGSO},
		{"gso-gro v6 cmsg tos", "udp6", "[::1]:0", Options{}, Options{}, 1200, 300, 0x10, false, ModeGSO},
		{"mmsg both", "udp4", "127.0.0.1:0", Options{NoOffload: true}, Options{NoOffload: true}, 200, 300, 0x10, true, ModeMmsg},
		{"plain both", "udp4", "127.0.0.1:0", Options{NoBatch: true}, Options{NoBatch: true}, 64, 100, 0x10, false, ModePlain},
		{"gso sender plain receiver", "udp4", "127.0.0.1:0", Options{}, Options{NoBatch: true}, 500, 200, -1, true, ModeGSO},
		{"odd last segment", "udp4", "127.0.0.1:0", Options{}, Options{}, 100, 47, -1, true, ModeGSO},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rx, err := net.ListenUDP(tc.network, mustUDPAddr(t, tc.addr))
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			rc, _ := rx.SyscallConn()
			_ = rc.Control(func(fd uintptr) {
				if tc.network == "udp6" {
					_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
				} else {
					_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
				}
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
			})
			if _, err := SetRecvBuffer(rx, 8<<20); err != nil {
				t.Logf("receive buffer: %v", err)
			}
			dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
			var tx *net.UDPConn
			var to netip.AddrPort
			if tc.connect {
				tx, err = net.DialUDP(tc.network, nil, net.UDPAddrFromAddrPort(dst))
			} else {
				tx, err = net.ListenUDP(tc.network, mustUDPAddr(t, tc.addr))
				to = dst
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			s, err := NewSender(tx, to, tc.tos, tc.send)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewReceiver(rx, 64, 65535, tc.recv)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, tc.size*tc.count)
			for i := 0; i < tc.count; i++ {
				binary.BigEndian.PutUint64(buf[i*tc.size:], uint64(i))
			}
			_ = tx.SetWriteDeadline(time.Now().Add(5 * time.Second))
			n, err := s.Send(buf, tc.size, tc.count)
			if err != nil || n != tc.count {
				t.Fatalf("Send = %d, %v; want %d", n, err, tc.count)
			}
			if s.Mode() != tc.wantMode {
				t.Errorf("sender mode %v, want %v (notes %v)", s.Mode(), tc.wantMode, s.Notes())
			}
			seen := make([]bool, tc.count)
			got := 0
			_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
			for got < tc.count {
				_, err := r.Recv(func(pkt []byte, from netip.AddrPort, m *Meta) {
					if len(pkt) != tc.size {
						t.Errorf("datagram of %d bytes, want %d", len(pkt), tc.size)
						return
					}
					seq := binary.BigEndian.Uint64(pkt)
					if seq >= uint64(tc.count) || seen[seq] {
						t.Errorf("bad or repeated sequence %d", seq)
						return
					}
					seen[seq] = true
					got++
					if m.KernelNs == 0 {
						t.Errorf("no kernel timestamp on %d", seq)
					}
					if tc.tos >= 0 && (!m.TOSOK || m.TOS != tc.tos) {
						t.Errorf("TOS on arrival %#x (ok %v), want %#x", m.TOS, m.TOSOK, tc.tos)
					}
					if !m.DropsOK && m.Drops != 0 {
						t.Errorf("drop counter without its cmsg")
					}
					if !from.IsValid() {
						t.Errorf("no source address")
					}
				})
				if err != nil {
					t.Fatalf("Recv after %d datagrams: %v", got, err)
				}
			}
		})
	}
}

func mustUDPAddr(t *testing.T, s string) *net.UDPAddr {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestParseCmsgs checks the parser on control messages built by hand.
func TestParseCmsgs(t *testing.T) {
	b := make([]byte, 256)
	n := putIntCmsg(b, unix.SOL_UDP, unix.UDP_GRO, 1400)
	n += putIntCmsg(b[n:], unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 7)
	n += putIntCmsg(b[n:], unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0xb8)
	m := ParseCmsgs(b[:n])
	if m.SegSize != 1400 || !m.DropsOK || m.Drops != 7 || !m.TOSOK || m.TOS != 0xb8 {
		t.Fatalf("ParseCmsgs = %+v", m)
	}
	if m := ParseCmsgs(b[:5]); m != (Meta{}) {
		t.Fatalf("truncated cmsgs parsed as %+v", m)
	}
}

func TestSegmentsPerSend(t *testing.T) {
	for _, tc := range []struct{ size, want int }{{1400, 46}, {28, 64}, {65507, 1}, {40000, 1}, {0, 1}} {
		if got := SegmentsPerSend(tc.size); got != tc.want {
			t.Errorf("SegmentsPerSend(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// TestNoAllocations checks that the per-datagram paths allocate nothing: a
// sender's Send (on a connection and on a blocking descriptor) and a
// descriptor receiver's RecvInThread. An allocation per call is a garbage
// collection every few thousand datagrams, on the CPU of the node's
// workloads.
func TestNoAllocations(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if _, err := SetRecvBuffer(rx, 8<<20); err != nil {
		t.Logf("receive buffer: %v", err)
	}
	dst := rx.LocalAddr().(*net.UDPAddr)
	conn, err := net.DialUDP("udp4", nil, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: dst.Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	byConn, err := NewSender(conn, netip.AddrPort{}, -1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byFd, err := NewSenderFd(fd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4*1000)
	for name, s := range map[string]*Sender{"conn": byConn, "fd": byFd} {
		if a := testing.AllocsPerRun(200, func() {
			if _, err := s.Send(buf, 1000, 4); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("Send on a %s sender: %.1f allocations per call, want 0", name, a)
		}
	}

	// The receiving side: a descriptor of its own, outside Go's poller.
	rfd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	if err := unix.Bind(rfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(rfd)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		t.Fatal(err)
	}
	rcv, err := NewReceiverFd(rfd, 8, 1<<16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	count := func(pkt []byte, from netip.AddrPort, m *Meta) { got++ }
	if a := testing.AllocsPerRun(200, func() {
		if _, err := byFd.Send(buf, 1000, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := rcv.RecvInThread(count, time.Second); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("RecvInThread on a descriptor: %.1f allocations per call, want 0", a)
	}
	if got == 0 {
		t.Error("the descriptor receiver read nothing")
	}
	if _, err := NewReceiverFd(rfd, 8, 1<<16, Options{NoBatch: true}); err == nil {
		t.Error("NewReceiverFd with NoBatch: no error")
	}
}
