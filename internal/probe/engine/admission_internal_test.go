package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
)

// TestHelloFitsBound: the largest hello a real client sends (every spec
// field set, names of DNS length, a key of the longest length) fits in
// maxHello, so the bound refuses only what no client sends.
func TestHelloFitsBound(t *testing.T) {
	host := strings.Repeat("h", 253)
	rate, tos := uint64(1<<63), 255
	sp := probe.Spec{Kind: probe.KindUDP, Target: host + ":65535", Source: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SourcePort: 65535,
		Duration: probe.Duration(1 << 62), StartDelay: probe.Duration(1 << 62), Interval: probe.Duration(1 << 62), Streams: 1 << 30, Reverse: true,
		RateBps: &rate, Size: 1 << 30, Proto: "crr", Count: 1 << 30, TOS: &tos, Offload: probe.OffloadAuto,
		WindowBytes: 1 << 30, MSS: 1 << 30, HistBinWidth: probe.Duration(1 << 62), HistBins: 1 << 30,
		Watch: &probe.WatchFlow{Proto: "icmp", Src: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Dst: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SrcPort: 65535, DstPort: 65535}, MaxTTL: 255, Timeout: probe.Duration(1 << 62)}
	m := Message{Type: MsgHello, Kind: probe.KindUDP, Session: NewSessionID().String(), Spec: &sp, Sync: 100,
		Key: strings.Repeat("k", probe.MaxTestKeyLen)}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)+1 > maxHello/2 {
		t.Errorf("the largest hello is %d bytes: keep maxHello (%d) at least twice that", len(b)+1, maxHello)
	}
	t.Logf("largest hello: %d bytes, bound %d", len(b)+1, maxHello)
}
