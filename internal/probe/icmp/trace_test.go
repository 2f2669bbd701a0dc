package icmp

import (
	"context"
	"fmt"
	"os/exec"
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
			res := traceAcross(t, c, spec)
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

// TestTraceDSCPRewrite traces A → R → B with EF-marked probes while R's
// egress towards B rewrites the DSCP to 0 (iptables mangle DSCP target):
// R's ICMP error quotes the probe as R received it (EF, 46), B's quotes it
// as B received it (0), and the text marks hop 2 as the first that differs.
func TestTraceDSCPRewrite(t *testing.T) {
	c := nettest.NewChain(t)
	if !privileged() {
		t.Skip("skipping: reading quoted headers needs CAP_NET_RAW")
	}
	cases := []struct {
		name, tool, proto string
		dst, hop1         string
	}{
		{"udp v4", "iptables", "udp", c.AddrB.String(), c.AddrRA.String()},
		{"icmp v4", "iptables", "icmp", c.AddrB.String(), c.AddrRA.String()},
		{"udp v6", "ip6tables", "udp", c.Addr6B.String(), c.Addr6RA.String()},
	}
	ruled := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !ruled[tc.tool] {
				rewriteDSCP(t, c.R, tc.tool, "eth2")
				ruled[tc.tool] = true
			}
			ef := 46 << 2
			spec := probe.Spec{Kind: probe.KindTrace, Target: tc.dst, Proto: tc.proto, MaxTTL: 5, Count: 2,
				Timeout: probe.Duration(2 * time.Second), TOS: &ef}
			res := traceAcross(t, c, spec)
			text := probe.FormatSummary(res)
			t.Logf("%s", text)
			if len(res.Hops) != 2 || res.Hops[0].Addr != tc.hop1 || !res.Hops[1].Reached {
				t.Fatalf("hops %+v, want the router %s then the destination", res.Hops, tc.hop1)
			}
			seen := func(h probe.Hop) string {
				if h.DSCPSeen == nil {
					return "absent"
				}
				return fmt.Sprint(*h.DSCPSeen)
			}
			if got := seen(res.Hops[0]); got != "46" {
				t.Errorf("hop 1 (router) dscp_seen %s, want 46", got)
			}
			wantDst := "0"
			if tc.proto == "icmp" {
				wantDst = "absent" // the destination answers with an echo reply, which quotes nothing
			}
			if got := seen(res.Hops[1]); got != wantDst {
				t.Errorf("hop 2 (destination) dscp_seen %s, want %s", got, wantDst)
			}
			lines := strings.Split(text, "\n")
			for i, want := range []bool{false, wantDst == "0"} {
				var line string
				for _, l := range lines {
					if strings.HasPrefix(strings.TrimSpace(l), fmt.Sprintf("%d ", i+1)) {
						line = l
					}
				}
				if got := strings.Contains(line, "DSCP changed"); got != want {
					t.Errorf("hop %d line %q: change marked %v, want %v", i+1, line, got, want)
				}
			}
		})
	}
}

// traceAcross runs spec in c's A until hop 1 answers and two hops are
// seen, or 10 s pass: a fresh IPv6 address may still be in duplicate
// address detection on the router. It fails the test on an error.
func traceAcross(t *testing.T, c *nettest.Chain, spec probe.Spec) *probe.Result {
	t.Helper()
	var res *probe.Result
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
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
	return res
}

// rewriteDSCP adds, in n, a mangle rule that sets the DSCP of everything
// leaving through dev to 0. It skips t when the tool or the DSCP target is
// missing; the rule goes with the namespace.
func rewriteDSCP(t *testing.T, n *nettest.NS, tool, dev string) {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("skipping: %s not installed", tool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-w", "5", "-t", "mangle", "-A", "POSTROUTING", "-o", dev, "-j", "DSCP", "--set-dscp", "0")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := n.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Skipf("skipping: cannot add a mangle DSCP rule here: %v: %s", err, out.String())
	}
}
