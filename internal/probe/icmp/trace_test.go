package icmp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestTraceChain traces A → R → B across a router namespace, with UDP and
// ICMP probes, IPv4 and IPv6: hop 1 is R's address on A's side, hop 2 is B
// and reached.
func TestTraceChain(t *testing.T) {
	c := nettest.NewChain(t)
	cases := []struct {
		name, proto string
		dst, hop1   string
	}{
		{"udp v4", "udp", c.AddrB.String(), c.AddrRA.String()},
		{"icmp v4", "icmp", c.AddrB.String(), c.AddrRA.String()},
		{"udp v6", "udp", c.Addr6B.String(), c.Addr6RA.String()},
		{"icmp v6", "icmp", c.Addr6B.String(), c.Addr6RA.String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindTrace, Target: tc.dst, Proto: tc.proto, MaxTTL: 5, Count: 2,
				Timeout: probe.Duration(2 * time.Second)}
			if err := (Trace{}).Validate(spec); err != nil {
				t.Fatal(err)
			}
			var res *probe.Result
			var err error
			deadline := time.Now().Add(10 * time.Second)
			for {
				// A fresh IPv6 address may still be in duplicate address
				// detection on the router: retry briefly.
				_ = c.A.Do(func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					res, err = (Trace{}).Run(ctx, spec, probe.Env{})
					return nil
				})
				if err == nil && len(res.Hops) == 2 && res.Hops[0].Addr != "" || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s", probe.FormatSummary(res))
			if len(res.Hops) != 2 {
				t.Fatalf("%d hops %+v, want 2 (router, destination)", len(res.Hops), res.Hops)
			}
			h1, h2 := res.Hops[0], res.Hops[1]
			if h1.TTL != 1 || h1.Addr != tc.hop1 || h1.Reached {
				t.Errorf("hop 1 %+v, want ttl 1 from %s, not the destination", h1, tc.hop1)
			}
			if h2.TTL != 2 || h2.Addr != tc.dst || !h2.Reached {
				t.Errorf("hop 2 %+v, want ttl 2 from %s, reached", h2, tc.dst)
			}
			for _, h := range res.Hops {
				if len(h.RTTms) != 2 {
					t.Errorf("hop %d has %d rtts, want 2", h.TTL, len(h.RTTms))
				}
				for _, v := range h.RTTms {
					// At most the 2 s wait (a first packet may wait for
					// neighbour resolution on a loaded machine).
					if v <= 0 || v > 2000 {
						t.Errorf("hop %d rtt %v ms: outside (0, 2000]", h.TTL, v)
					}
				}
			}
		})
	}
}

func TestTraceBadInput(t *testing.T) {
	cases := []struct {
		name string
		spec probe.Spec
		want string
	}{
		{"proto", probe.Spec{Target: "127.0.0.1", Proto: "tcp"}, "proto"},
		{"ttl", probe.Spec{Target: "127.0.0.1", MaxTTL: 300}, "max ttl"},
		{"count", probe.Spec{Target: "127.0.0.1", Count: 50}, "count"},
		{"negative timeout", probe.Spec{Target: "127.0.0.1", Timeout: -1}, "negative"},
		{"no target", probe.Spec{}, "target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Kind = probe.KindTrace
			err := (Trace{}).Validate(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, tc.want)
			}
		})
	}
}
