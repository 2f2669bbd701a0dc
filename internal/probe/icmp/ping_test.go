package icmp

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"golang.org/x/sys/unix"
)

func tos(v int) *int { return &v }

// requireICMP skips t when this process can open neither kind of ICMP
// socket.
func requireICMP(t *testing.T) {
	t.Helper()
	c, err := openICMP(false, SocketAuto, netip.Addr{})
	if err != nil {
		t.Skipf("skipping: cannot open an ICMP socket here: %v", err)
	}
	c.Close()
}

func TestPingLoopback(t *testing.T) {
	requireICMP(t)
	cases := []struct {
		name   string
		target string
		count  int
		size   int
		tos    *int
	}{
		{"ipv4 default size", "127.0.0.1", 3, 0, nil},
		{"ipv6", "::1", 4, 0, nil},
		{"ipv4 marked EF, small payload", "127.0.0.1", 3, 4, tos(46 << 2)},
		{"ipv6 marked AF41, large payload", "::1", 2, 9000, tos(34 << 2)},
		{"name localhost", "localhost", 2, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindPing, Target: tc.target, Count: tc.count, Size: tc.size,
				Interval: probe.Duration(20 * time.Millisecond), Timeout: probe.Duration(2 * time.Second), TOS: tc.tos}
			res := runPing(t, Ping{}, spec)
			if res.RTTms == nil || int(res.RTTms.Count) != tc.count {
				t.Fatalf("rtt summary %+v, want %d replies; notes %v", res.RTTms, tc.count, res.Notes)
			}
			s := res.RTTms
			if !(s.Min > 0 && s.Min <= s.Avg && s.Avg <= s.Max && s.Max < 1000 && s.Stdev >= 0) {
				t.Errorf("implausible rtt summary %+v", s)
			}
			if *res.LossPct != 0 {
				t.Errorf("loss %v%%, want 0", *res.LossPct)
			}
			wantDSCP := 0
			if tc.tos != nil {
				wantDSCP = *tc.tos >> 2
			}
			if res.DSCPReceived == nil || *res.DSCPReceived != wantDSCP || !*res.DSCPSurvived {
				t.Errorf("dscp received %v, want %d", res.DSCPReceived, wantDSCP)
			}
			if !strings.Contains(strings.Join(res.Notes, "\n"), "socket") {
				t.Errorf("notes do not say which socket was used: %v", res.Notes)
			}
			t.Logf("%s", probe.FormatSummary(res))
		})
	}
}

func TestPingSocketModes(t *testing.T) {
	nettest.Require(t)
	p := nettest.NewPair(t)
	for _, mode := range []string{SocketDgram, SocketRaw} {
		t.Run(mode, func(t *testing.T) {
			var res *probe.Result
			warmUp(t, p.A, p.AddrB.String())
			err := p.A.Do(func() error {
				// This namespace admits every group to ICMP datagram
				// sockets; the host's setting is left alone.
				if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644); err != nil {
					return err
				}
				var err error
				res, err = (Ping{Socket: mode}).Run(context.Background(), probe.Spec{Kind: probe.KindPing,
					Target: p.AddrB.String(), Count: 3, Interval: probe.Duration(10 * time.Millisecond)}, probe.Env{})
				return err
			})
			if err != nil {
				t.Fatalf("ping: %v", err)
			}
			if res.RTTms == nil || res.RTTms.Count != 3 || *res.LossPct != 0 {
				t.Fatalf("got rtt %+v loss %v, want 3 replies; notes %v", res.RTTms, res.LossPct, res.Notes)
			}
			want := map[string]string{SocketDgram: "datagram", SocketRaw: "raw"}[mode]
			if !strings.Contains(res.Notes[0], want) {
				t.Errorf("socket note %q does not say %q", res.Notes[0], want)
			}
		})
	}
}

// warmUp waits until ns reaches each target with an echo: a fresh veth
// drops packets until the kernel's link watcher activates its queue (up
// to a second), and an IPv6 address stays tentative during duplicate
// address detection; either would show as loss in the first echoes.
func warmUp(t *testing.T, ns *nettest.NS, targets ...string) {
	t.Helper()
	for _, target := range targets {
		var last error
		for range 10 {
			last = ns.Do(func() error {
				res, err := (Ping{}).Run(context.Background(), probe.Spec{Kind: probe.KindPing, Target: target,
					Count: 1, Timeout: probe.Duration(time.Second)}, probe.Env{})
				if err == nil && *res.LossPct != 0 {
					err = fmt.Errorf("no reply within 1s")
				}
				return err
			})
			if last == nil {
				break
			}
		}
		if last != nil {
			t.Fatalf("warm-up ping to %s: %v", target, last)
		}
	}
}

func TestPingAcrossPair(t *testing.T) {
	p := nettest.NewPair(t)
	warmUp(t, p.A, p.AddrB.String(), p.Addr6B.String())
	cases := []struct {
		name     string
		target   string
		count    int
		interval time.Duration
		timeout  time.Duration
		tos      *int
		wantLoss float64
	}{
		{"ipv4 EF", p.AddrB.String(), 5, 10 * time.Millisecond, time.Second, tos(46 << 2), 0},
		{"ipv6 CS1", p.Addr6B.String(), 3, 10 * time.Millisecond, time.Second, tos(8 << 2), 0},
		{"nobody at the address", "198.18.0.99", 3, 100 * time.Millisecond, 300 * time.Millisecond, nil, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := probe.Spec{Kind: probe.KindPing, Target: tc.target, Count: tc.count,
				Interval: probe.Duration(tc.interval), Timeout: probe.Duration(tc.timeout), TOS: tc.tos}
			var res *probe.Result
			began := time.Now()
			err := p.A.Do(func() error {
				var err error
				res, err = (Ping{}).Run(context.Background(), spec, probe.Env{})
				return err
			})
			if err != nil {
				t.Fatalf("ping: %v", err)
			}
			if took := time.Since(began); took > time.Duration(tc.count)*tc.interval+tc.timeout+time.Second {
				t.Errorf("took %v: not bounded by count × interval + timeout", took)
			}
			if *res.LossPct != tc.wantLoss {
				t.Fatalf("loss %v%%, want %v%%; notes %v", *res.LossPct, tc.wantLoss, res.Notes)
			}
			if res.Src != p.AddrA.String() && res.Src != p.Addr6A.String() {
				t.Errorf("src %s, want A's address", res.Src)
			}
			if tc.wantLoss == 100 {
				if res.RTTms != nil || res.DSCPReceived != nil {
					t.Errorf("no reply came, yet rtt %+v dscp %v", res.RTTms, res.DSCPReceived)
				}
				return
			}
			if res.RTTms == nil || int(res.RTTms.Count) != tc.count || res.RTTms.Min <= 0 {
				t.Fatalf("rtt %+v, want %d positive replies", res.RTTms, tc.count)
			}
			if res.DSCPReceived == nil || *res.DSCPReceived != *tc.tos>>2 || !*res.DSCPSurvived {
				t.Errorf("dscp on the replies %v, want %d", res.DSCPReceived, *tc.tos>>2)
			}
			t.Logf("%s", probe.FormatSummary(res))
		})
	}
}

func TestPingDuration(t *testing.T) {
	requireICMP(t)
	spec := probe.Spec{Kind: probe.KindPing, Target: "127.0.0.1", Duration: probe.Duration(250 * time.Millisecond),
		Interval: probe.Duration(50 * time.Millisecond)}
	res := runPing(t, Ping{}, spec)
	// Sends at 0, 50, ..., 200 ms: five echoes. The duration bounds what
	// is sent; a reply that a loaded machine delays past the deadline is
	// counted lost, as ping -w counts it, so replies are only bounded
	// above.
	if res.Packets == nil || res.Packets.Sent < 4 || res.Packets.Sent > 6 {
		t.Fatalf("packets %+v: want about 5 echoes sent in 250 ms at 50 ms", res.Packets)
	}
	if res.RTTms == nil || res.RTTms.Count < 1 || int64(res.RTTms.Count) > res.Packets.Sent {
		t.Fatalf("rtt %+v of %d sent: want at least one reply and no more than were sent", res.RTTms, res.Packets.Sent)
	}
}

// TestPingCancel: a cancelled ping ends at once with the statistics of
// what it sent, as ping(8) on SIGINT, and a note naming the cause.
func TestPingCancel(t *testing.T) {
	requireICMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	res, err := (Ping{}).Run(ctx, probe.Spec{Kind: probe.KindPing, Target: "127.0.0.1", Count: 100}, probe.Env{})
	if err != nil {
		t.Fatalf("err %v, want the partial result", err)
	}
	if res.Packets == nil || res.Packets.Sent < 1 || res.Packets.Sent >= 100 {
		t.Errorf("packets %+v: want some, not all 100, sent before the cancel", res.Packets)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "stopped early: context deadline exceeded") {
		t.Errorf("notes %q: want the stop named", res.Notes)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("cancel took %v", took)
	}
}

func TestPingBadInput(t *testing.T) {
	cases := []struct {
		name    string
		spec    probe.Spec
		mode    string
		wantErr string
	}{
		{"negative count", probe.Spec{Target: "127.0.0.1", Count: -1}, "", "count -1"},
		{"size too big", probe.Spec{Target: "127.0.0.1", Size: 65508}, "", "size 65508"},
		{"interval below minimum", probe.Spec{Target: "127.0.0.1", Interval: probe.Duration(time.Microsecond)}, "", "below the 1ms minimum"},
		{"negative interval", probe.Spec{Target: "127.0.0.1", Interval: probe.Duration(-time.Second)}, "", "must not be negative"},
		{"host with port", probe.Spec{Target: "127.0.0.1:80"}, "", "without a port"},
		{"no target", probe.Spec{}, "", "target: missing"},
		{"bad socket mode", probe.Spec{Target: "127.0.0.1"}, "icmp", "socket mode"},
		{"tos out of range", probe.Spec{Target: "127.0.0.1", TOS: tos(256)}, "", "tos 256"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Kind = probe.KindPing
			err := (Ping{Socket: tc.mode}).Validate(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPingRunErrors(t *testing.T) {
	requireICMP(t)
	cases := []struct {
		name    string
		target  string
		emptyNS bool // run in a namespace without routes (skipped without root)
		wantErr string
	}{
		{"unresolvable name", "no-such-host.invalid", true, "resolve host"},
		{"no route", "2001:db8::1", true, "no route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			run := func() error {
				_, err = (Ping{}).Run(ctx, probe.Spec{Kind: probe.KindPing, Target: tc.target, Count: 1}, probe.Env{})
				return nil
			}
			if tc.emptyNS {
				// An empty namespace has no routes at all, whatever the host has.
				nettest.Require(t)
				n, nerr := nettest.NewNS(fmt.Sprintf("%sicmp-noroute-%d", nettest.Prefix, os.Getpid()))
				if nerr != nil {
					t.Fatalf("namespace: %v", nerr)
				}
				t.Cleanup(func() { _ = nettest.Delete(n) })
				_ = n.Do(run)
			} else {
				_ = run()
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func runPing(t *testing.T, p Ping, spec probe.Spec) *probe.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Validate(spec); err != nil {
		t.Fatalf("validate: %v", err)
	}
	res, err := p.Run(ctx, spec, probe.Env{})
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	return res
}

// withoutNetRaw runs fn on the calling thread with CAP_NET_RAW out of its
// effective set (capabilities are per thread; the caller has locked it,
// as NS.Do does) and puts it back after.
func withoutNetRaw(fn func() error) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	saved := data
	data[0].Effective &^= 1 << unix.CAP_NET_RAW
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop CAP_NET_RAW: %w", err)
	}
	err := fn()
	if rerr := unix.Capset(&hdr, &saved[0]); rerr != nil {
		panic(fmt.Sprintf("restore CAP_NET_RAW on a locked thread: %v", rerr)) // the thread must not go back to the pool
	}
	return err
}

// TestPingWithoutNetRaw: a process without CAP_NET_RAW (an agent under
// Pod Security restricted) pings at the baseline's 10 ms on a ping socket
// where net.ipv4.ping_group_range admits its group, and where it does not,
// fails with an error naming ping_group_range and CAP_NET_RAW.
func TestPingWithoutNetRaw(t *testing.T) {
	nettest.Require(t)
	p := nettest.NewPair(t)
	warmUp(t, p.A, p.AddrB.String())
	for _, tc := range []struct {
		name, groups string
		wantErr      []string
	}{
		{"ping sockets admitted", "0 2147483647", nil},
		{"ping sockets refused", "1 0", []string{"net.ipv4.ping_group_range", "CAP_NET_RAW"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res *probe.Result
			err := p.A.Do(func() error {
				if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(tc.groups), 0o644); err != nil {
					return err
				}
				return withoutNetRaw(func() error {
					if privileged() {
						return fmt.Errorf("CAP_NET_RAW still effective")
					}
					var err error
					res, err = (Ping{}).Run(context.Background(), probe.Spec{Kind: probe.KindPing,
						Target: p.AddrB.String(), Count: 3, Interval: probe.Duration(10 * time.Millisecond)}, probe.Env{})
					return err
				})
			})
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("err %v, want one naming %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ping without CAP_NET_RAW: %v", err)
			}
			if res.RTTms == nil || res.RTTms.Count != 3 || *res.LossPct != 0 || !strings.Contains(res.Notes[0], "datagram") {
				t.Errorf("got rtt %+v loss %v notes %v, want 3 replies on the datagram socket", res.RTTms, res.LossPct, res.Notes)
			}
		})
	}
}
