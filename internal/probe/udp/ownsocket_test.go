package udp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// TestOwnSocket checks that a forward test's datagrams all arrive on a
// socket of the session's own, paced and at full speed, with nothing
// repeated or reordered; and that the shared socket receives them all
// when the responder is told to (SharedOnly), when the client does not
// name its data socket (an older cnperf).
func TestOwnSocket(t *testing.T) {
	cases := []struct {
		name       string
		sharedOnly bool
		nameFrom   func(netip.AddrPort) string
		rate       uint64
		wantOwn    bool
	}{
		{"paced", false, nil, 50_000_000, true},
		{"unpaced", false, nil, 0, true},
		{"shared only", true, nil, 50_000_000, false},
		{"client names no address", false, func(netip.AddrPort) string { return "" }, 50_000_000, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{SharedOnly: tc.sharedOnly}
			addr := probetest.Start(t, h)
			spec := probe.Spec{Kind: probe.KindUDP, Target: addr, RateBps: rate(tc.rate), Size: 1000, Duration: probe.Duration(time.Second)}
			res := run(t, &Prober{nameFrom: tc.nameFrom}, spec)
			own := h.ownDatagrams.Load()
			p := *res.Packets
			t.Logf("%d of %d datagrams read from the session's own socket; recv_mode %s", own, p.Received, res.RecvMode)
			if p.Received == 0 || p.Duplicate != 0 || p.OutOfOrder != 0 {
				t.Errorf("packets %+v: loopback repeats and reorders nothing", p)
			}
			if tc.rate > 0 && p.Lost != 0 {
				t.Errorf("packets %+v: a paced test on loopback lost datagrams", p)
			}
			if want := map[bool]int64{true: p.Received, false: 0}[tc.wantOwn]; own != want {
				t.Errorf("%d of %d datagrams from the session's own socket, want %d", own, p.Received, want)
			}
			if res.RecvMode == "" {
				t.Error("recv_mode empty")
			}
		})
	}
}

// TestOwnSocketPeer checks which start messages get a session socket: only
// an address on the control connection's host, since a socket connected
// to another host's address would take that host's datagrams (another
// test's) off the shared socket.
func TestOwnSocketPeer(t *testing.T) {
	ctrl4 := &net.TCPAddr{IP: net.IPv4(10, 1, 0, 2), Port: 5201}
	ctrl6 := &net.TCPAddr{IP: net.ParseIP("fd00::2"), Port: 5201}
	cases := []struct {
		name       string
		from       string
		ctrl       net.Addr
		sharedOnly bool
		want       bool
	}{
		{"same host", "10.1.0.2:40000", ctrl4, false, true},
		{"same host v6", "[fd00::2]:40000", ctrl6, false, true},
		{"v4-mapped control", "10.1.0.2:40000", &net.TCPAddr{IP: net.ParseIP("::ffff:10.1.0.2"), Port: 5201}, false, true},
		{"another host", "10.1.0.3:40000", ctrl4, false, false},
		{"none named", "", ctrl4, false, false},
		{"not an address", "10.1.0.2", ctrl4, false, false},
		{"port zero", "10.1.0.2:0", ctrl4, false, false},
		{"shared only", "10.1.0.2:40000", ctrl4, true, false},
	}
	for _, tc := range cases {
		h := &Handler{SharedOnly: tc.sharedOnly}
		got, ok := h.ownSocketPeer(startData{From: tc.from}, tc.ctrl)
		if ok != tc.want || (ok && got.String() != netip.MustParseAddrPort(tc.from).String()) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}
