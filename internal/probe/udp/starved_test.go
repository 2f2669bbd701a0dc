package udp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
	"github.com/cnperf/cnperf/internal/qos"
)

// TestStarvedPathTowardTheReceiver is the thesis's failing policing case
// in small: a limiter toward the receiving responder with a deep queue (a
// tbf at 1 Mbit/s holding 16 MB, as the CNI bandwidth plugin's ingress
// limit holds half a gigabyte) and 50 times its rate offered. The flood
// fills the queue, so the client's stop and the acknowledgements of the
// control connection wait behind it for minutes; the test must still end
// within its length plus the stop's grace, the drain and a margin, with
// the receiver's figures: what arrived (about the limit), the loss
// (nearly everything not yet through the queue) and a note saying the
// receiver ended on its own.
func TestStarvedPathTowardTheReceiver(t *testing.T) {
	// A — R — B, the limiter on R's link toward B, where the CNI puts it
	// (the host side of the pod's veth): what waits there is no longer
	// charged to the sender's socket, so the sender keeps its rate.
	chain := nettest.NewChain(t)
	addr := probetest.StartIn(t, chain.B, chain.AddrB, NewHandler())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tbf := qos.TBF{Rate: 1e6, BurstBytes: 16 << 10, LimitBytes: 16 << 20}
	if err := qos.Apply(ctx, qos.Target{NetNS: chain.R.Path(), Link: "eth2"}, tbf); err != nil {
		t.Fatalf("tbf toward the receiver: %v", err)
	}
	const d = 2 * time.Second
	spec := probe.Spec{Kind: probe.KindUDP, Target: addr, RateBps: rate(50_000_000), Duration: probe.Duration(d),
		Interval: probe.Duration(100 * time.Millisecond), Timeout: probe.Duration(2 * time.Second)}
	var res *probe.Result
	t0 := time.Now()
	err := chain.A.Do(func() (err error) {
		res, err = New().Run(ctx, spec, probe.Env{})
		return err
	})
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("Run after %v: %v", took, err)
	}
	t.Logf("took %v: %s; notes %q", took, probe.FormatSummary(res), res.Notes)
	if bound := d + stopGrace + drainMax + 3*time.Second; took > bound {
		t.Errorf("took %v, want at most %v", took, bound)
	}
	if res.LossPct == nil || *res.LossPct < 0 || *res.LossPct > 100 {
		t.Fatalf("loss %v %%, want a figure of 0-100 %%", res.LossPct)
	}
	// 50 Mbit/s offered to a 1 Mbit/s queue loses most of it once the
	// sender gets the CPU to offer it (a figure).
	figure.Check(t, *res.LossPct >= 80, "loss %v %%, want at least 80 %% (the queue holds most of what was sent)", *res.LossPct)
	// The receiver's rate in the flow's second half, from its intervals
	// (its bytes over the sender's 2 s include what came during the wait).
	var bytes, secs float64
	for _, iv := range res.Intervals {
		if iv.StartS >= d.Seconds()/2 && iv.EndS <= d.Seconds() {
			bytes, secs = bytes+iv.Bytes, secs+iv.EndS-iv.StartS
		}
	}
	if secs == 0 || bytes <= 0 || bytes*8/secs > 1.5e6 {
		t.Errorf("receiver %.0f bytes in %.1f s of intervals, want some and at most the 1 Mbit/s limit (1.5 for the intervals' edges)", bytes, secs)
	}
	figure.Check(t, secs > 0 && bytes*8/secs >= 0.5e6, "receiver %.0f bytes in %.1f s of intervals, want about the 1 Mbit/s limit", bytes, secs)
	if !strings.Contains(strings.Join(res.Notes, "\n"), "ended the test on its own") {
		t.Errorf("no note that the receiver ended on its own: %q", res.Notes)
	}
}

func TestResultDatagramRoundTrip(t *testing.T) {
	id, other := engine.NewSessionID(), engine.NewSessionID()
	js := []byte(`{"received":3}`)
	d := resultDatagram(id, js)
	if got, ok := parseResultDatagram(id, d); !ok || string(got) != string(js) {
		t.Errorf("round trip: %q, %v", got, ok)
	}
	if _, ok := parseResultDatagram(other, d); ok {
		t.Error("another session's result accepted")
	}
	data := make([]byte, HeaderLen)
	Packet{Session: id, Seq: 1}.Put(data)
	if _, ok := parseResultDatagram(id, data); ok {
		t.Error("a data datagram taken for a result")
	}
	if resultDatagram(id, make([]byte, maxResultDatagram)) != nil {
		t.Error("an oversized result datagram")
	}
}
