package udp

import (
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// TestOwnSocket checks that a forward test's datagrams all arrive on a
// socket of the session's own, paced and at full speed, with nothing
// repeated or reordered; and that the shared socket receives them all
// when the responder is told to (SharedOnly) or the client does not name
// its data socket (an older cnperf).
func TestOwnSocket(t *testing.T) {
	cases := []struct {
		name       string
		sharedOnly bool
		omitFrom   bool
		rate       uint64
		wantOwn    bool
	}{
		{"paced", false, false, 50_000_000, true},
		{"unpaced", false, false, 0, true},
		{"shared only", true, false, 50_000_000, false},
		{"client names no address", false, true, 50_000_000, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{SharedOnly: tc.sharedOnly}
			addr := probetest.Start(t, h)
			spec := probe.Spec{Kind: probe.KindUDP, Target: addr, RateBps: rate(tc.rate), Size: 1000, Duration: probe.Duration(time.Second)}
			res := run(t, &Prober{omitFrom: tc.omitFrom}, spec)
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
