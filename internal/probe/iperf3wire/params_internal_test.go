package iperf3wire

import (
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
)

// TestClientParamsBandwidthPerStream: a spec's rate is the total over its
// streams; iperf3's bandwidth parameter is per stream.
func TestClientParamsBandwidthPerStream(t *testing.T) {
	rate := func(r uint64) *uint64 { return &r }
	for _, c := range []struct {
		name    string
		spec    probe.Spec
		want    uint64
		streams int
	}{
		{"tcp 200M over 2 streams", probe.Spec{Kind: probe.KindTCP, Streams: 2, RateBps: rate(200e6)}, 100e6, 2},
		{"tcp 100M, one stream", probe.Spec{Kind: probe.KindTCP, RateBps: rate(100e6)}, 100e6, 1},
		{"tcp unlimited", probe.Spec{Kind: probe.KindTCP, Streams: 4, RateBps: rate(0)}, 0, 4},
		{"udp default", probe.Spec{Kind: probe.KindUDP}, DefaultUDPRate, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := clientParams(c.spec)
			if p.Bandwidth != c.want || p.Parallel != c.streams {
				t.Errorf("bandwidth %d x %d streams, want %d x %d", p.Bandwidth, p.Parallel, c.want, c.streams)
			}
		})
	}
}
