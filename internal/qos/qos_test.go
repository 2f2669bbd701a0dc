package qos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/nettest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// features detects once per test what the kernel has.
func features(t *testing.T) Features {
	t.Helper()
	f, err := Detect(testCtx(t), "")
	if err != nil {
		t.Fatalf("detect: %v", err)
	}
	return f
}

// needsMissing returns the first feature s needs that the kernel lacks.
func needsMissing(f Features, s Setup) string {
	for _, n := range s.Needs() {
		if !f.Has(n) {
			return n
		}
	}
	return ""
}

// clean fails t unless link carries only the kernel's default root qdisc:
// no qdisc with a handle, no ingress qdisc, no class, no filter.
func assertClean(t *testing.T, tg Target) {
	t.Helper()
	st, err := Show(tg)
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, q := range st.Qdiscs {
		if q.Handle != "0:0" || q.Parent == "ingress" {
			t.Errorf("left behind: qdisc %s %s parent %s", q.Kind, q.Handle, q.Parent)
		}
	}
	for _, c := range st.Classes {
		t.Errorf("left behind: class %s %s", c.Kind, c.Handle)
	}
	for _, f := range st.Filters {
		t.Errorf("left behind: filter %s parent %s", f.Kind, f.Parent)
	}
}

// nsHandle opens a netlink handle in namespace ns, closed in t.Cleanup.
func nsHandle(t *testing.T, ns *nettest.NS) *netlink.Handle {
	t.Helper()
	h, err := netns.GetFromName(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nh.Close)
	return nh
}

// ifbs lists the ifb devices in a namespace.
func ifbs(t *testing.T, ns *nettest.NS) []string {
	t.Helper()
	links, err := nsHandle(t, ns).LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if l.Type() == "ifb" {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

func allSetups() []struct {
	name  string
	setup Setup
	want  []string // lines Config must contain
} {
	return []struct {
		name  string
		setup Setup
		want  []string
	}{
		{"pfifo_fast", PfifoFast{}, []string{"qdisc pfifo_fast 1:0 parent root priomap [1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1]"}},
		{"htb priority, packet leaves", HTBPriority{Rate: 1e9, HighDSCP: []int{46, 2, 4}, Leaf: QueueLimit{Packets: 100}}, []string{
			"qdisc htb 1:0 parent root default 1:20",
			"class htb 1:10 parent 1:1 rate 500000000 ceil 1000000000 prio 0",
			"class htb 1:20 parent 1:1 rate 500000000 ceil 1000000000 prio 1",
			"qdisc pfifo 10:0 parent 1:10 limit 100p",
			"filter u32 parent 1:0 prio 1 protocol ip classid 1:10 keys match 00b80000/00fc0000 at 0",
			"filter u32 parent 1:0 prio 2 protocol ipv6 classid 1:10 keys match 0b800000/0fc00000 at 0",
		}},
		{"htb priority, byte leaves", HTBPriority{Rate: 100e6, HighRate: 20e6, HighDSCP: []int{46}, Leaf: QueueLimit{Bytes: 150000}}, []string{
			"class htb 1:10 parent 1:1 rate 20000000 ceil 100000000 prio 0",
			"qdisc bfifo 20:0 parent 1:20 limit 150000b",
		}},
		{"tbf", TBF{Rate: 10e6, BurstBytes: 32 * 1024}, []string{"qdisc tbf 1:0 parent root rate 10000000 burst 3276", " limit 64018b"}},
		{"bottleneck tbf", Bottleneck{Rate: 1e9}, []string{"qdisc tbf 1:0 parent root rate 1000000000 burst 32000 limit 1500000b"}},
		{"bottleneck htb", Bottleneck{Rate: 1e9, Mode: BottleneckHTB, QueuePackets: 500}, []string{"qdisc pfifo 10:0 parent 1:1 limit 500p"}},
		{"bandwidth plugin both ways", BandwidthPlugin{IngressRate: 10e6, IngressBurst: 32 * 1024, EgressRate: 20e6, EgressBurst: 64 * 1024}, []string{
			"qdisc tbf 1:0 parent root rate 10000000 burst 3276",
			"qdisc ingress ffff:0 parent ingress",
			"filter u32 parent ffff:0 prio 1 protocol all classid 1:1 keys match 00000000/00000000 at 0 actions mirred egress redir dev bwp",
			" then stolen",
		}},
		{"bandwidth plugin egress only", BandwidthPlugin{EgressRate: 10e6, EgressBurst: 32 * 1024}, []string{"qdisc ingress ffff:0 parent ingress"}},
		{"police", Police{Rate: 10e6, BurstBytes: 32 * 1024}, []string{"qdisc ingress ffff:0 parent ingress"}},
	}
}

// TestApplyTwiceSameStateRemoveLeavesNone: every setup applied twice gives
// the same kernel state, and removing it leaves none.
func TestApplyTwiceSameStateRemoveLeavesNone(t *testing.T) {
	p := newPair(t)
	f := features(t)
	tg := p.target(p.A)
	for _, tc := range allSetups() {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			if miss := needsMissing(f, tc.setup); miss != "" {
				err := Apply(ctx, tg, tc.setup)
				var ue *UnsupportedError
				if !errors.As(err, &ue) || ue.Feature != miss {
					t.Fatalf("apply without %s: got %v, want *UnsupportedError for %s", miss, err, miss)
				}
				assertClean(t, tg)
				t.Skipf("kernel lacks %s; Apply said: %v", miss, err)
			}
			t.Cleanup(func() { _ = Remove(tg, tc.setup) })
			if err := Apply(ctx, tg, tc.setup); err != nil {
				t.Fatalf("apply: %v", err)
			}
			first, err := Show(tg)
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(ctx, tg, tc.setup); err != nil {
				t.Fatalf("apply again: %v", err)
			}
			second, err := Show(tg)
			if err != nil {
				t.Fatal(err)
			}
			if first.Config() != second.Config() {
				t.Errorf("state differs after the second apply:\nfirst:\n%s\nsecond:\n%s", first.Config(), second.Config())
			}
			for _, w := range tc.want {
				if !strings.Contains(first.Config(), w) {
					t.Errorf("state lacks %q:\n%s", w, first.Config())
				}
			}
			if bp, ok := tc.setup.(BandwidthPlugin); ok && bp.EgressRate != 0 {
				if got := ifbs(t, p.A); len(got) != 1 {
					t.Errorf("ifb devices after two applies: %v, want exactly one", got)
				}
			}
			if err := Remove(tg, tc.setup); err != nil {
				t.Fatalf("remove: %v", err)
			}
			assertClean(t, tg)
			if got := ifbs(t, p.A); len(got) != 0 {
				t.Errorf("ifb devices left after remove: %v", got)
			}
			if err := Remove(tg, tc.setup); err != nil {
				t.Errorf("removing what is not there: %v", err)
			}
		})
	}
}

// TestApplyReplacesOtherSetup: a setup applied over another kind leaves
// only itself.
func TestApplyReplacesOtherSetup(t *testing.T) {
	p := newPair(t)
	ctx := testCtx(t)
	tg := p.target(p.A)
	t.Cleanup(func() { _ = Remove(tg, TBF{}) })
	if err := Apply(ctx, tg, HTBPriority{Rate: 1e9, HighDSCP: []int{46}}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, tg, TBF{Rate: 10e6, BurstBytes: 32 * 1024}); err != nil {
		t.Fatal(err)
	}
	st, err := Show(tg)
	if err != nil {
		t.Fatal(err)
	}
	htbLeft := len(st.Filters) != 0
	for _, c := range st.Classes {
		htbLeft = htbLeft || c.Kind == "htb"
	}
	if htbLeft {
		t.Errorf("htb leftovers under tbf:\n%s", st.Config())
	}
	if r, ok := st.Root(); !ok || r.Kind != "tbf" {
		t.Errorf("root %+v, want tbf", r)
	}
}

// sendUDP sends n datagrams of 100 bytes from inside ns to dst:9 with the
// given TOS byte (IPv4) or traffic class (IPv6).
func sendUDP(t *testing.T, ns *nettest.NS, dst string, tos, n int) {
	t.Helper()
	err := ns.Do(func() error {
		network := "udp4"
		if strings.Contains(dst, ":") {
			network = "udp6"
		}
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if network == "udp6" {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
				}
			})
			return errors.Join(err, serr)
		}}
		c, err := lc.ListenPacket(context.Background(), network, "")
		if err != nil {
			return err
		}
		defer c.Close()
		to, err := net.ResolveUDPAddr(network, net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		buf := make([]byte, 100)
		for i := 0; i < n; i++ {
			if _, err := c.WriteTo(buf, to); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send from %s: %v", ns.Name, err)
	}
}

// classPackets polls until the class's packet count stops changing.
func classPackets(t *testing.T, tg Target, handle string) uint64 {
	t.Helper()
	var last uint64
	deadline := time.Now().Add(3 * time.Second)
	for stable := 0; stable < 3 && time.Now().Before(deadline); {
		st, err := Show(tg)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := st.Class(handle)
		if !ok {
			t.Fatalf("no class %s:\n%s", handle, st.Config())
		}
		if c.Stats.Packets == last {
			stable++
		} else {
			stable, last = 0, c.Stats.Packets
		}
		time.Sleep(20 * time.Millisecond)
	}
	return last
}

// TestU32TOSMatchesPickTheClass sends marked and unmarked datagrams
// through an HTB priority tree and reads the class counters: the high
// class gets exactly the packets whose DSCP it was given (ECN bits
// ignored), over IPv4 and IPv6; everything else goes to the default.
func TestU32TOSMatchesPickTheClass(t *testing.T) {
	p := newPair(t)
	ctx := testCtx(t)
	tg := p.target(p.A)
	setup := HTBPriority{Rate: 1e9, HighDSCP: []int{46, 4}}
	t.Cleanup(func() { _ = Remove(tg, setup) })
	if err := Apply(ctx, tg, setup); err != nil {
		t.Fatal(err)
	}
	hi0, def0 := classPackets(t, tg, "1:10"), classPackets(t, tg, "1:20")
	sends := []struct {
		dst      string
		tos, n   int
		wantHigh bool
	}{
		{p.v4B.String(), 0xb8, 50, true},  // EF
		{p.v4B.String(), 0xb9, 7, true},   // EF with ECT(1): ECN bits ignored
		{p.v4B.String(), 0x10, 30, true},  // TOS 0x10 = DSCP 4
		{p.v4B.String(), 0x08, 25, false}, // TOS 0x08 = DSCP 2, not asked for
		{p.v4B.String(), 0x00, 40, false}, // unmarked
		{p.v6B.String(), 0xb8, 20, true},  // EF over IPv6
		{p.v6B.String(), 0x00, 15, false}, // unmarked over IPv6
	}
	wantHigh, wantDefault := uint64(0), uint64(0)
	for _, s := range sends {
		sendUDP(t, p.A, s.dst, s.tos, s.n)
		if s.wantHigh {
			wantHigh += uint64(s.n)
		} else {
			wantDefault += uint64(s.n)
		}
	}
	hi, def := classPackets(t, tg, "1:10")-hi0, classPackets(t, tg, "1:20")-def0
	if hi != wantHigh {
		t.Errorf("high class 1:10 counted %d packets, want %d (the marked ones)", hi, wantHigh)
	}
	// The default class also sees the odd ARP/ND packet.
	if def < wantDefault || def > wantDefault+4 {
		t.Errorf("default class 1:20 counted %d packets, want %d (+ at most 4 ARP/ND)", def, wantDefault)
	}
}

// TestBandwidthPluginRedirectsToIfb: traffic arriving on the host-side
// veth (the pod's egress) goes through the ifb's tbf, traffic leaving it
// (the pod's ingress) through the root tbf.
func TestBandwidthPluginRedirectsToIfb(t *testing.T) {
	p := newPair(t)
	ctx := testCtx(t)
	tg := p.target(p.A)
	setup := BandwidthPlugin{IngressRate: 100e6, IngressBurst: 64 * 1024, EgressRate: 100e6, EgressBurst: 64 * 1024, IfbName: "bwptest"}
	t.Cleanup(func() { _ = Remove(tg, setup) })
	if err := Apply(ctx, tg, setup); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, p.B, p.v4A.String(), 0, 60) // arrives on A's eth0: redirected to the ifb
	sendUDP(t, p.A, p.v4B.String(), 0, 70) // leaves A's eth0: root tbf
	root := func(tg Target) uint64 {
		st, err := Show(tg)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := st.Root()
		if !ok || r.Kind != "tbf" {
			t.Fatalf("root of %s: %+v, want tbf", tg, r)
		}
		return r.Stats.Packets
	}
	if n := root(Target{NetNS: tg.NetNS, Link: "bwptest"}); n < 60 {
		t.Errorf("ifb tbf saw %d packets, want at least the 60 sent towards A", n)
	}
	if n := root(tg); n < 70 || n > 80 {
		t.Errorf("veth root tbf saw %d packets, want 70 (+ a few ICMP/ARP)", n)
	}
}

// TestDetectSaysWhatIsMissing: every feature is tried; what is absent
// carries the kernel's reason; setups needing it fail with an
// UnsupportedError that names it and leave the link as it was.
func TestDetectSaysWhatIsMissing(t *testing.T) {
	nettest.Require(t)
	f := features(t)
	t.Logf("%s (in %s)", f.Summary(), f.Where)
	if len(f.List) != len(AllFeatures()) {
		t.Fatalf("detect tried %d features, want %d", len(f.List), len(AllFeatures()))
	}
	for _, x := range f.List {
		if !x.Present && x.Err == "" {
			t.Errorf("%s absent without a reason", x.Name)
		}
	}
	for _, need := range []string{FeatureHTB, FeatureTBF, FeatureU32, FeaturePfifo} {
		if !f.Has(need) {
			t.Errorf("kernel lacks %s, which the qos suites need", need)
		}
	}
	if absent := f.Absent(); len(absent) > 0 && !strings.Contains(f.Summary(), "lacks: ") {
		t.Errorf("summary %q does not list %v", f.Summary(), absent)
	}

	p := newPair(t)
	ctx := testCtx(t)
	tg := p.target(p.A)
	pre := TBF{Rate: 50e6, BurstBytes: 64 * 1024}
	t.Cleanup(func() { _ = Remove(tg, pre) })
	if err := Apply(ctx, tg, pre); err != nil {
		t.Fatal(err)
	}
	before, _ := Show(tg)
	custom := [16]uint8{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2}
	for _, s := range []Setup{Police{Rate: 10e6, BurstBytes: 16 * 1024}, PfifoFast{Priomap: &custom}} {
		miss := needsMissing(f, s)
		if miss == "" {
			continue
		}
		err := Apply(ctx, tg, s)
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s without %s: got %v, want *UnsupportedError", s.Kind(), miss, err)
			continue
		}
		if want := "unsupported: kernel lacks the " + featureNoun(miss); !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
		after, _ := Show(tg)
		if before.Config() != after.Config() {
			t.Errorf("failed %s changed the link:\n%s\nto\n%s", s.Kind(), before.Config(), after.Config())
		}
	}
}

// TestBadInput: bad parameters are rejected with an error naming the
// problem before anything is touched; a failure in a list of setups
// removes the ones already applied.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name  string
		setup Setup
		want  string
	}{
		{"dscp 64", HTBPriority{Rate: 1e9, HighDSCP: []int{64}}, "dscp: 64 is outside 0-63"},
		{"dscp -1", HTBPriority{Rate: 1e9, HighDSCP: []int{-1}}, "dscp: -1 is outside 0-63"},
		{"no dscp", HTBPriority{Rate: 1e9}, "no DSCP value"},
		{"htb rate 0", HTBPriority{HighDSCP: []int{46}}, "rate 0"},
		{"tbf rate 0", TBF{BurstBytes: 1500}, "rate 0"},
		{"tbf burst 0", TBF{Rate: 1e6}, "burst: 0 bytes"},
		{"bottleneck rate 0", Bottleneck{}, "rate 0"},
		{"bottleneck mode", Bottleneck{Rate: 1e9, Mode: "red"}, `mode: "red"`},
		{"bandwidth nothing", BandwidthPlugin{}, "rate 0 in both directions"},
		{"bandwidth burst without rate", BandwidthPlugin{EgressBurst: 100}, "a burst needs a rate"},
		{"bandwidth huge burst", BandwidthPlugin{EgressRate: 1e6, EgressBurst: 4 << 20}, "over 4 s of tokens"},
		{"police rate 0", Police{BurstBytes: 1500}, "rate 0"},
		{"leaf both limits", HTBPriority{Rate: 1e9, HighDSCP: []int{46}, Leaf: QueueLimit{Bytes: 3000, Packets: 10}}, "not both"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.setup.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
			// Apply refuses before it opens the target.
			err = Apply(context.Background(), Target{NetNS: "/nonexistent/netns", Link: "eth0"}, tc.setup)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Apply: %v, want a *ValidationError", err)
			}
		})
	}
}

func TestBadInputRemovesWhatWasApplied(t *testing.T) {
	p := newPair(t)
	ctx := testCtx(t)
	a, b := p.target(p.A), p.target(p.B)

	t.Run("bottleneck above the link's rate", func(t *testing.T) {
		slow := Target{NetNS: b.NetNS, Link: b.Link, RateBps: 1e9}
		undo, err := ApplyAll(ctx, []Item{
			{a, HTBPriority{Rate: 1e9, HighDSCP: []int{46}}},
			{slow, Bottleneck{Rate: 2e9}},
		})
		if err == nil {
			_ = undo()
			t.Fatal("a 2 Gbit/s bottleneck on a 1 Gbit/s link was accepted")
		}
		if !strings.Contains(err.Error(), "2 Gbit/s is above the link's rate 1 Gbit/s") {
			t.Errorf("error %q does not name the rates", err)
		}
		assertClean(t, a)
		assertClean(t, b)
	})
	t.Run("missing link", func(t *testing.T) {
		_, err := ApplyAll(ctx, []Item{
			{a, TBF{Rate: 10e6, BurstBytes: 32 * 1024}},
			{Target{NetNS: a.NetNS, Link: "nosuch0"}, TBF{Rate: 10e6, BurstBytes: 32 * 1024}},
		})
		if !errors.Is(err, ErrLinkNotFound) {
			t.Fatalf("got %v, want ErrLinkNotFound", err)
		}
		assertClean(t, a)
	})
	t.Run("dscp out of range touches nothing", func(t *testing.T) {
		_, err := ApplyAll(ctx, []Item{
			{a, TBF{Rate: 10e6, BurstBytes: 32 * 1024}},
			{b, HTBPriority{Rate: 1e9, HighDSCP: []int{46, 99}}},
		})
		if err == nil || !strings.Contains(err.Error(), "99 is outside 0-63") {
			t.Fatalf("got %v", err)
		}
		assertClean(t, a)
		assertClean(t, b)
	})
	t.Run("undo removes all", func(t *testing.T) {
		undo, err := ApplyAll(ctx, []Item{
			{a, Bottleneck{Rate: 1e9}},
			{b, BandwidthPlugin{EgressRate: 10e6, EgressBurst: 32 * 1024}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		assertClean(t, a)
		assertClean(t, b)
		if got := ifbs(t, p.B); len(got) != 0 {
			t.Errorf("ifb left: %v", got)
		}
	})
}

func TestFormatBps(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{{1e9, "1 Gbit/s"}, {12.5e6, "12.5 Mbit/s"}, {999, "999 bit/s"}, {2e12, "2 Tbit/s"}, {64e3, "64 kbit/s"}} {
		if got := FormatBps(tc.in); got != tc.want {
			t.Errorf("FormatBps(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSetVXLANTOS flips a vxlan device to tos inherit and back, keeping
// its VNI and port.
func TestSetVXLANTOS(t *testing.T) {
	p := newPair(t)
	nh := nsHandle(t, p.A)
	eth, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxq0"}, VxlanId: 42, Port: 8472, VtepDevIndex: eth.Attrs().Index, Learning: false}
	if err := nh.LinkAdd(vx); err != nil {
		t.Fatalf("add vxlan: %v", err)
	}
	ns := p.A.Path()
	for _, want := range []uint8{TOSInherit, 0} {
		if err := SetVXLANTOS(ns, "vxq0", want); err != nil {
			t.Fatal(err)
		}
		got, err := VXLANTOS(ns)
		if err != nil {
			t.Fatal(err)
		}
		if got["vxq0"] != want {
			t.Errorf("tos %d after setting %d", got["vxq0"], want)
		}
		l, err := nh.LinkByName("vxq0")
		if err != nil {
			t.Fatal(err)
		}
		if v := l.(*netlink.Vxlan); v.VxlanId != 42 || v.Port != 8472 {
			t.Errorf("vni %d port %d changed", v.VxlanId, v.Port)
		}
	}
	if err := SetVXLANTOS(ns, "eth0", 1); err == nil || !strings.Contains(err.Error(), "not vxlan") {
		t.Errorf("setting tos on a veth: %v", err)
	}
}

// recvCount listens on udp port 9 in ns and returns a function that stops
// listening and says how many datagrams arrived.
func recvCount(t *testing.T, ns *nettest.NS) func() int {
	t.Helper()
	var c net.PacketConn
	if err := ns.Do(func() error {
		var err error
		c, err = net.ListenPacket("udp4", ":9")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	n := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		count := 0
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				n <- count
				return
			}
			count++
		}
	}()
	return func() int {
		_ = c.Close()
		return <-n
	}
}

// TestBandwidthPluginShapes sends a burst of 200 datagrams of 1000 bytes
// each way through 1 Mbit/s limits with a 4 KiB burst: the tbf (limit
// 25 ms of the rate plus the burst) lets a few dozen through in 100 ms,
// not 200. It would catch a redirect that also lets the packet pass.
func TestBandwidthPluginShapes(t *testing.T) {
	p := newPair(t)
	ctx := testCtx(t)
	tg := p.target(p.A)
	setup := BandwidthPlugin{IngressRate: 1e6, IngressBurst: 4096, EgressRate: 1e6, EgressBurst: 4096}
	t.Cleanup(func() { _ = Remove(tg, setup) })
	if err := Apply(ctx, tg, setup); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []struct {
		name     string
		from, to *nettest.NS
		dst      string
	}{
		{"pod egress (ingress qdisc, ifb)", p.B, p.A, p.v4A.String()},
		{"pod ingress (root tbf)", p.A, p.B, p.v4B.String()},
	} {
		stop := recvCount(t, dir.to)
		sendSized(t, dir.from, dir.dst, 1000, 200)
		time.Sleep(100 * time.Millisecond)
		got := stop()
		if got < 3 || got > 60 {
			t.Errorf("%s: %d of 200 datagrams arrived in 100 ms through 1 Mbit/s, want a few dozen", dir.name, got)
		}
	}
}

// sendSized sends n datagrams of size bytes from ns to dst:9.
func sendSized(t *testing.T, ns *nettest.NS, dst string, size, n int) {
	t.Helper()
	err := ns.Do(func() error {
		c, err := net.ListenPacket("udp4", "")
		if err != nil {
			return err
		}
		defer c.Close()
		to, err := net.ResolveUDPAddr("udp4", net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		buf := make([]byte, size)
		for i := 0; i < n; i++ {
			if _, err := c.WriteTo(buf, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVXLANInheritSetup: the vxlan-inherit set-up (as Build makes it from
// its Spec) turns every VXLAN device of the namespace to tos inherit and
// removing it restores each device's own TOS (0, and a fixed 0x10); a
// namespace with no VXLAN device is refused, naming why.
func TestVXLANInheritSetup(t *testing.T) {
	p := newPair(t)
	nh := nsHandle(t, p.A)
	eth, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	ns := p.A.Path()
	s, err := Build(Spec{Setup: SpecVXLANInherit})
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(context.Background(), Target{NetNS: ns, Link: "eth0"}, s); err == nil || !strings.Contains(err.Error(), "no VXLAN device") {
		t.Fatalf("apply without a VXLAN device: %v", err)
	}
	before := map[string]uint8{"vxq0": 0, "vxq1": 0x10}
	for i, name := range []string{"vxq0", "vxq1"} {
		vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name}, VxlanId: 42 + i, Port: 8472 + i, VtepDevIndex: eth.Attrs().Index, TOS: int(before[name])}
		if err := nh.LinkAdd(vx); err != nil {
			t.Fatalf("add vxlan: %v", err)
		}
	}
	if err := Apply(context.Background(), Target{NetNS: ns, Link: "eth0"}, s); err != nil {
		t.Fatal(err)
	}
	got, err := VXLANTOS(ns)
	if err != nil {
		t.Fatal(err)
	}
	if got["vxq0"] != TOSInherit || got["vxq1"] != TOSInherit {
		t.Errorf("after apply: %v, want both inherit (%d)", got, TOSInherit)
	}
	if err := Remove(Target{NetNS: ns, Link: "eth0"}, s); err != nil {
		t.Fatal(err)
	}
	if got, err = VXLANTOS(ns); err != nil || got["vxq0"] != before["vxq0"] || got["vxq1"] != before["vxq1"] {
		t.Errorf("after remove: %v (%v), want %v", got, err, before)
	}
}

// TestVXLANInheritRefusesMetadataMode: on a node with a metadata-mode
// VXLAN device (ip link add ... type vxlan external, as Cilium makes
// cilium_vxlan), vxlan-inherit is refused naming the device and why, and
// no device is changed (the plain one beside it keeps its TOS);
// VXLANMetadata names the device.
func TestVXLANInheritRefusesMetadataMode(t *testing.T) {
	p := newPair(t)
	nh := nsHandle(t, p.A)
	eth, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	ns := p.A.Path()
	if err := nh.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxq0"}, VxlanId: 42, Port: 4789, VtepDevIndex: eth.Attrs().Index}); err != nil {
		t.Fatalf("add vxlan: %v", err)
	}
	if err := nh.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxmd"}, Port: 8472, FlowBased: true}); err != nil {
		t.Fatalf("add metadata-mode vxlan: %v", err)
	}
	md, err := VXLANMetadata(ns)
	if err != nil || len(md) != 1 || md[0] != "vxmd" {
		t.Fatalf("VXLANMetadata = %v (%v), want [vxmd]", md, err)
	}
	s, err := Build(Spec{Setup: SpecVXLANInherit})
	if err != nil {
		t.Fatal(err)
	}
	err = Apply(context.Background(), Target{NetNS: ns, Link: "eth0"}, s)
	if err == nil || !strings.Contains(err.Error(), "vxmd is a metadata-mode VXLAN device") || !strings.Contains(err.Error(), "tunnel key") {
		t.Fatalf("apply with a metadata-mode device: %v, want a refusal naming vxmd and why", err)
	}
	got, err := VXLANTOS(ns)
	if err != nil {
		t.Fatal(err)
	}
	if got["vxq0"] != 0 || got["vxmd"] != 0 {
		t.Errorf("after the refusal: %v, want every device untouched (tos 0)", got)
	}
}
