package udp

import (
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// TestOwnSocket checks that a receiving test moves from the responder's
// shared socket to a socket of the session's own after its first datagram,
// and that the switch loses, repeats and reorders nothing, paced and at
// full speed; SharedOnly keeps everything on the shared socket.
func TestOwnSocket(t *testing.T) {
	cases := []struct {
		name       string
		sharedOnly bool
		rate       uint64
	}{
		{"paced", false, 50_000_000},
		{"unpaced", false, 0},
		{"shared only", true, 50_000_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{SharedOnly: tc.sharedOnly}
			addr := probetest.Start(t, h)
			spec := probe.Spec{Kind: probe.KindUDP, Target: addr, RateBps: rate(tc.rate), Size: 1000, Duration: probe.Duration(time.Second)}
			res := run(t, New(), spec)
			own := h.ownDatagrams.Load()
			p := *res.Packets
			t.Logf("%d of %d datagrams read from the session's own socket; recv_mode %s", own, p.Received, res.RecvMode)
			if p.Received == 0 || p.Duplicate != 0 || p.OutOfOrder != 0 {
				t.Errorf("packets %+v: the switch of sockets must not repeat or reorder", p)
			}
			if tc.rate > 0 && p.Lost != 0 {
				t.Errorf("packets %+v: a paced test on loopback lost datagrams", p)
			}
			switch {
			case tc.sharedOnly && own != 0:
				t.Errorf("SharedOnly: %d datagrams came from a session socket", own)
			case !tc.sharedOnly && own < p.Received/2:
				t.Errorf("%d of %d datagrams from the session's own socket, want most", own, p.Received)
			}
			if res.RecvMode == "" {
				t.Error("recv_mode empty")
			}
		})
	}
}
