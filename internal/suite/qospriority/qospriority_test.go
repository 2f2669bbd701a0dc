package qospriority

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestParseMarking(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Marking
		err  string
	}{
		{"none", Marking{Name: "none"}, ""},
		{"0x10", Marking{Name: "TOS 0x10", TOS: 0x10}, ""},
		{"tos:0x08", Marking{Name: "TOS 0x08", TOS: 0x08}, ""},
		{"tos=16", Marking{Name: "TOS 0x10", TOS: 0x10}, ""},
		{"EF", Marking{Name: "EF", TOS: 0xb8}, ""},
		{"af41", Marking{Name: "AF41", TOS: 34 << 2}, ""},
		{"dscp:46", Marking{Name: "EF", TOS: 0xb8}, ""},
		{"0x00", Marking{Name: "none"}, ""},
		{"dscp:64", Marking{}, "0-63"},
		{"tos:0x1ff", Marking{}, "0-255"},
		{"urgent", Marking{}, "not a known name"},
		{"", Marking{}, "empty"},
	} {
		got, err := ParseMarking(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

func TestQoSPriorityBadInput(t *testing.T) {
	base := suite.Options{Time: 2 * time.Second, Repeat: 1}
	with := func(backend string, kv ...string) suite.Options {
		o := base
		o.Backend = backend
		o.Set = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			o.Set[kv[i]] = kv[i+1]
		}
		return o
	}
	for _, c := range []struct {
		name string
		o    suite.Options
		want string
	}{
		{"dscp above 63", with("host-gw", "high-dscp", "64"), "DSCP 64 is outside 0-63"},
		{"marking dscp above 63", with("host-gw", "markings", "none,dscp:70"), "0-63"},
		{"bottleneck rate 0", with("host-gw", "bottleneck-rate", "0"), "rate 0"},
		{"unknown variant", with("host-gw", "variants", "fifo,red"), `variant "red"`},
		{"vxlan on host-gw", with("host-gw", "variants", "vxlan"), "needs VXLAN between the nodes"},
		{"htb on vxlan", with("vxlan", "variants", "htb-priority"), "is the variant vxlan"},
		{"unknown setting", with("host-gw", "rate", "1G"), "unknown setting rate"},
		{"tiny queue", with("host-gw", "queue", "100"), "full-size packet"},
		{"background sctp", with("host-gw", "background", "sctp"), `background "sctp"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			caps := suitetest.LabCaps()
			if c.o.Backend == "vxlan" {
				caps = suitetest.VXLANLabCaps()
			}
			_, err := Suite{}.Plan(suitetest.LabAgents(), c.o, caps)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
	t.Run("changes need a lab", func(t *testing.T) {
		phases, err := Suite{}.Plan(suitetest.LabAgents(), with("host-gw", "variants", "fifo,pfifo_fast"), suite.Caps{})
		if err != nil {
			t.Fatal(err)
		}
		if ch := phases[0].Changes; len(ch) != 1 || ch[0].What != suite.CapNodeQdisc || ch[0].Member != "node2" || ch[0].QoS.Setup != qosspec.SpecBottleneck {
			t.Errorf("fifo changes %+v", ch)
		}
		if ch := phases[len(phases)-1].Changes; len(ch) != 1 || ch[0].What != suite.CapPodQdisc || ch[0].Member != "n2-p1" {
			t.Errorf("pfifo_fast changes %+v", ch)
		}
	})
}

func TestQoSPriorityPlan(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 2, Backend: "host-gw"}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	variants := DefaultVariants(suite.Caps{})
	if want := 2 * len(variants) * 3; len(phases) != want {
		t.Fatalf("%d phases, want %d (one per marked marking, beside the unmarked one)", len(phases), want)
	}
	for _, ph := range phases {
		if !ph.Concurrent || len(ph.Steps) != 7 {
			t.Fatalf("phase %q: concurrent %v with %d steps, want 5 flows and 2 wire watches, concurrent", ph.Name, ph.Concurrent, len(ph.Steps))
		}
		v := ph.Steps[0].Labels[LabelVariant]
		if (v == VariantNone) != (len(ph.Changes) == 0) {
			t.Errorf("phase %q: changes %v", ph.Name, ph.Changes)
		}
		perAgent := map[string]int{}
		for _, st := range ph.Steps {
			perAgent[st.Src.ID]++
		}
		for id, n := range perAgent {
			if n > 4 {
				t.Errorf("phase %q: %d tasks from agent %s, which runs at most 4 at once", ph.Name, n, id)
			}
		}
		bg := ph.Steps[0]
		if bg.Measure != MeasureBackground || bg.Spec.TOS != nil || *bg.Spec.RateBps != 2e9 {
			t.Errorf("background %+v", bg)
		}
		if bg.Src.Node == bg.Dst.Node {
			t.Errorf("the flows must cross the bottleneck between nodes: %s → %s", bg.Src.Node, bg.Dst.Node)
		}
		if ph.Steps[1].Labels["tos"] != "0" {
			t.Errorf("phase %q: the unmarked reference is not first", ph.Name)
		}
		checkWireWatch(t, ph)
		for i := 1; i < 5; i += 2 {
			fg, ping := ph.Steps[i], ph.Steps[i+1]
			if fg.Measure != MeasureForeground || ping.Measure != suite.MeasurePing {
				t.Fatalf("measures %s %s", fg.Measure, ping.Measure)
			}
			tos := fg.Labels["tos"]
			if (tos == "0") != (fg.Spec.TOS == nil) || (fg.Spec.TOS != nil && fmt.Sprint(*fg.Spec.TOS) != tos) {
				t.Errorf("foreground tos %v for marking %s", fg.Spec.TOS, fg.Labels[LabelMarking])
			}
			if *fg.Spec.RateBps != 100*100*8 || fg.Spec.Size != 100 || fg.Src.ID != bg.Src.ID {
				t.Errorf("foreground %d bit/s of %d-byte datagrams, want 100 pps of 100 bytes from the flood's sender", *fg.Spec.RateBps, fg.Spec.Size)
			}
			if bg.Spec.Duration.D() <= fg.Spec.Duration.D() {
				t.Errorf("background %v does not cover the foreground's %v", bg.Spec.Duration.D(), fg.Spec.Duration.D())
			}
			if ping.Spec.Count != 200 || (ping.Spec.TOS != nil) != (fg.Spec.TOS != nil) || ping.Src.ID != bg.Dst.ID || ping.Spec.Target != bg.Src.IP {
				t.Errorf("ping %+v from %s", ping.Spec, ping.Src.ID)
			}
		}
	}
	tcp, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Backend: "host-gw",
		Set: map[string]string{"background": "tcp"}}, suitetest.LabCaps())
	if err != nil || tcp[0].Steps[0].Spec.Kind != probe.KindTCP || tcp[0].Steps[0].Spec.RateBps != nil {
		t.Errorf("tcp background: %v %+v", err, tcp[0].Steps[0].Spec)
	}
	vx, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Backend: "vxlan"}, suitetest.VXLANLabCaps())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, ph := range vx {
		got[ph.Steps[0].Labels[LabelVariant]] = true
	}
	if !got[VariantVXLAN] || !got[VariantVXLANInherit] || got[VariantHTBPriority] {
		t.Errorf("vxlan variants: %v", got)
	}
}

func TestVariantSetup(t *testing.T) {
	o := Options{BottleneckRateBps: 1e9}
	for _, c := range []struct {
		v               string
		uplink, pod     string
		backend         string
		inherit         bool
		wantQueueBytes  uint32
		wantHighDSCPLen int
	}{
		{VariantNone, "", "", PathPlain, false, 0, 0},
		{VariantFIFO, "bottleneck", "", PathPlain, false, 0, 0},
		{VariantPfifoFast, "", "pfifo_fast", PathPlain, false, 0, 0},
		{VariantHTBPriority, "htb-priority", "", PathPlain, false, 1500000, 2},
		{VariantVXLAN, "htb-priority", "", PathVXLAN, false, 1500000, 2},
		{VariantVXLANInherit, "htb-priority", "", PathVXLAN, true, 1500000, 2},
	} {
		s, err := o.SetupFor(c.v)
		if err != nil {
			t.Fatal(err)
		}
		kind := func(x *qosspec.Spec) string {
			if x == nil {
				return ""
			}
			return x.Setup
		}
		if kind(s.Uplink) != c.uplink || kind(s.PodEth0) != c.pod || s.Path != c.backend || s.VXLANInheritTOS != c.inherit {
			t.Errorf("%s: %+v", c.v, s)
		}
		if h := s.Uplink; h != nil && h.Setup == qosspec.SpecHTBPriority && (h.Leaf.Bytes != c.wantQueueBytes || len(h.DSCP) != c.wantHighDSCPLen) {
			t.Errorf("%s: htb %+v", c.v, h)
		}
		inherit := 0
		for _, ch := range s.Changes(suite.Pair{Src: suitetest.LabAgents()[2], Dst: suitetest.LabAgents()[0]}) {
			if ch.What == suite.CapVXLANTOS {
				inherit++
			}
		}
		if (inherit == 2) != c.inherit {
			t.Errorf("%s: %d tos-inherit changes", c.v, inherit)
		}
	}
}

// qosOutcomes makes one repetition's outcomes of a variant, phase by
// phase as Plan groups the markings: foreground p99 latencies (ms).
func qosOutcomes(variant string, p99s map[Marking]float64) []suite.Outcome {
	var ms []Marking
	for _, m := range DefaultMarkings() {
		if _, ok := p99s[m]; ok {
			ms = append(ms, m)
		}
	}
	q := Options{Markings: ms}.withDefaults()
	var out []suite.Outcome
	for k, g := range markingGroups(ms) {
		steps := qosSteps(q, variant, k, g, suite.Pair{Src: suitetest.LabAgents()[2], Dst: suitetest.LabAgents()[0]}, suite.PodPodCrossNode, "host-gw")
		out = append(out, suite.Outcome{Step: steps[0], Result: &probe.Result{ThroughputBps: &probe.SenderReceiver{Sender: 2e9, Receiver: 0.97e9}, LossPct: probe.Float(50)}})
		for i, m := range g {
			v := p99s[m]
			out = append(out,
				suite.Outcome{Step: steps[1+2*i], Result: &probe.Result{LatencyMs: &probe.Summary{Min: v / 10, Avg: v / 2, P50: v / 2, P99: v, Max: v * 1.1, Count: 200},
					JitterMs: probe.Float(v / 20), LossPct: probe.Float(1), PPS: probe.Float(100), Histogram: &probe.Histogram{BinWidthUs: 100, Counts: []int64{150, 48, 2}}}},
				suite.Outcome{Step: steps[2+2*i], Result: &probe.Result{RTTms: &probe.Summary{Avg: v, P99: v * 1.2, Count: 200}, LossPct: probe.Float(0)}})
		}
	}
	return out
}

func TestQoSRowsAndVerdicts(t *testing.T) {
	none, cs1, low, ef := DefaultMarkings()[0], DefaultMarkings()[1], DefaultMarkings()[2], DefaultMarkings()[3]
	var outs []suite.Outcome
	outs = append(outs, qosOutcomes(VariantFIFO, map[Marking]float64{none: 11.3, cs1: 11.5, low: 11.2, ef: 11.4})...)
	outs = append(outs, qosOutcomes(VariantPfifoFast, map[Marking]float64{none: 0.025, low: 0.015, ef: 0.02})...)
	outs = append(outs, qosOutcomes(VariantHTBPriority, map[Marking]float64{none: 11.4, cs1: 11.2, low: 0.031, ef: 0.03})...)
	outs = append(outs, qosOutcomes("partial", map[Marking]float64{none: 9, ef: 3})...)
	outs = append(outs, qosOutcomes("unmarked only", map[Marking]float64{none: 9})...)
	rows := Suite{}.Rows(outs)
	if len(rows) != 4+3+4+2+1 {
		t.Fatalf("%d rows", len(rows))
	}
	want := map[string]string{
		VariantFIFO:        "no effect: the queue where packets wait ignores the mark (p99 unmarked 11.3 ms, TOS 0x10 11.2 ms)",
		VariantPfifoFast:   "no effect: no queue builds where the qdisc sits (p99 unmarked 0.025 ms, TOS 0x10 0.015 ms)",
		VariantHTBPriority: "priority protected the marked flow (EF): p99 11.4 ms → 0.030 ms",
		"partial":          "partial: EF cut p99 3.0× (9.00 ms → 3.00 ms), less than the 10× of a priority queue",
		"unmarked only":    "unknown: no marked foreground measured (unmarked p99 9.00 ms)",
	}
	for _, r := range rows {
		v := r.Labels[LabelVariant]
		if r.Labels[LabelVerdict] != want[v] {
			t.Errorf("%s: verdict %q, want %q", v, r.Labels[LabelVerdict], want[v])
		}
	}
	ef0 := rows[3] // fifo, EF
	b, err := json.Marshal(ef0)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"variant", "marking", "latency_ms", "rtt_ms", "loss_pct", "jitter_ms", "pps", "background_throughput_bps", "verdict", "tos", "dscp", "latency_histogram", "reference_latency_ms"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("row JSON lacks %q: %s", k, b)
		}
	}
	if obj["variant"] != VariantFIFO || obj["marking"] != "EF" || obj["dscp"] != 46.0 {
		t.Errorf("row JSON: %s", b)
	}
	if p99 := obj["latency_ms"].(map[string]any)["p99"]; p99 != 11.4 {
		t.Errorf("latency_ms.p99 = %v", p99)
	}
	if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, "htb-priority: priority protected the marked flow (EF)") || !strings.Contains(txt, "11.4") {
		t.Errorf("table:\n%s", txt)
	}
}

func TestQoSRowsMedianAndErrors(t *testing.T) {
	none := DefaultMarkings()[0]
	a := qosOutcomes(VariantFIFO, map[Marking]float64{none: 10})
	b := qosOutcomes(VariantFIFO, map[Marking]float64{none: 14})
	c := qosOutcomes(VariantFIFO, map[Marking]float64{none: 12})
	for i := range b {
		b[i].Step.Repeat, c[i].Step.Repeat = 1, 2
	}
	c[1] = suite.Outcome{Step: c[1].Step, Err: "responder unreachable"}
	c[0] = suite.Outcome{Step: c[0].Step, Err: "flood failed"}
	rows := Suite{}.Rows(append(append(a, b...), c...))
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if r.Median["latency_ms.p99"] != 12 || r.Min["latency_ms.p99"] != 10 || r.Max["latency_ms.p99"] != 14 {
		t.Errorf("p99 median %v min %v max %v, want 12 10 14 (from the two complete and ... repetitions)", r.Median["latency_ms.p99"], r.Min["latency_ms.p99"], r.Max["latency_ms.p99"])
	}
	if len(r.Errors) != 2 || !strings.Contains(r.Errors[0], "foreground #3: responder unreachable") || !strings.Contains(r.Errors[1], "background #3: flood failed") {
		t.Errorf("errors %v", r.Errors)
	}
}

// TestOffloadSetting: the udp flows use offload auto (the flood needs it
// to fill the bottleneck) unless --set offload=off; anything else is
// refused.
func TestOffloadSetting(t *testing.T) {
	cases := []struct {
		set, want, err string
	}{
		{"", probe.OffloadAuto, ""},
		{"off", probe.OffloadOff, ""},
		{"yes", "", "offload"},
	}
	for _, tc := range cases {
		t.Run("offload="+tc.set, func(t *testing.T) {
			o := suite.Options{Time: time.Second, Repeat: 1, Backend: "host-gw", Set: map[string]string{}}
			if tc.set != "" {
				o.Set["offload"] = tc.set
			}
			phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Plan = %v, want an error about %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			udp := 0
			for _, ph := range phases {
				for _, st := range ph.Steps {
					if st.Spec.Kind != probe.KindUDP {
						continue
					}
					udp++
					if st.Spec.Offload != tc.want {
						t.Errorf("%s step offload %q, want %q", st.Measure, st.Spec.Offload, tc.want)
					}
				}
			}
			if udp == 0 {
				t.Fatal("no udp steps planned")
			}
		})
	}
}

// checkWireWatch: the phase's marked foreground sends from a fixed port,
// and the host-network agents of both nodes watch that flow (5-tuple) on
// their underlay, for as long as the background runs.
func checkWireWatch(t *testing.T, ph suite.Phase) {
	t.Helper()
	bg, fg := ph.Steps[0], ph.Steps[3]
	if fg.Spec.StartDelay.D() != wireLead || ph.Steps[1].Spec.StartDelay.D() != wireLead {
		t.Errorf("phase %q: foregrounds wait %v and %v, want %v (the watches start first)", ph.Name, ph.Steps[1].Spec.StartDelay.D(), fg.Spec.StartDelay.D(), wireLead)
	}
	if fg.Spec.TOS == nil || fg.Spec.SourcePort < wirePortBase || ph.Steps[1].Spec.SourcePort != 0 {
		t.Errorf("phase %q: marked foreground source port %d, unmarked %d: want a fixed port for the marked one only", ph.Name, fg.Spec.SourcePort, ph.Steps[1].Spec.SourcePort)
	}
	for i, at := range []struct{ on, peer string }{{bg.Src.Node, bg.Dst.Node}, {bg.Dst.Node, bg.Src.Node}} {
		w := ph.Steps[5+i]
		want := probe.WatchFlow{Proto: "udp", Src: bg.Src.IP, Dst: bg.Dst.IP, SrcPort: fg.Spec.SourcePort, DstPort: 5201}
		if w.Measure != MeasureWire || w.Spec.Kind != probe.KindWire || !w.Src.HostNetwork || w.Src.Node != at.on || w.Dst.Node != at.peer ||
			w.Spec.Watch == nil || *w.Spec.Watch != want || w.Spec.Duration != bg.Spec.Duration || w.Exclusive ||
			w.Labels[LabelMarking] != fg.Labels[LabelMarking] || w.Repeat != fg.Repeat {
			t.Errorf("phase %q: watch %d %+v (flow %+v), want one on %s's host agent for %+v", ph.Name, i, w, w.Spec.Watch, at.on, want)
		}
	}
}

// TestQoSPriorityClusterPlan: on a cluster the defaults are as-is and
// pod-htb on both placements; pod-htb asks for the HTB tree on the
// sending pod's own interface, node-htb for it on the sending node
// (cross node only: traffic within a node never crosses its uplink).
func TestQoSPriorityClusterPlan(t *testing.T) {
	caps := suite.Caps{AsIs: true, Have: []suite.Cap{suite.CapPodQdisc, suite.CapPodShaping}}
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"markings": "none,EF"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, caps)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ph := range phases {
		st := ph.Steps[0]
		got = append(got, st.Connection+"/"+st.Labels[LabelVariant])
		v := st.Labels[LabelVariant]
		switch {
		case v == VariantAsIs && len(ph.Changes) != 0:
			t.Errorf("%s: as-is asks for changes %v", ph.Name, ph.Changes)
		case v == VariantPodHTB && (len(ph.Changes) != 1 || ph.Changes[0].What != suite.CapPodQdisc || ph.Changes[0].Member != st.Src.Name ||
			ph.Changes[0].QoS.Setup != qosspec.SpecHTBPriority || ph.Changes[0].QoS.RateBps != 1e9):
			t.Errorf("%s: pod-htb changes %+v", ph.Name, ph.Changes)
		}
		for _, s := range ph.Steps {
			if (s.Connection == suite.PodPodSameNode) != (s.Src.Node == s.Dst.Node) {
				t.Errorf("%s: step %s %s → %s", ph.Name, s.Connection, s.Src.Name, s.Dst.Name)
			}
		}
	}
	want := "pod-pod same node/as-is pod-pod same node/pod-htb pod-pod cross node/as-is pod-pod cross node/pod-htb"
	if strings.Join(got, " ") != want {
		t.Errorf("phases %q, want %q", strings.Join(got, " "), want)
	}
	o.Set["variants"] = "as-is,node-htb"
	phases, err = Suite{}.Plan(suitetest.LabAgents(), o, caps)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, ph := range phases {
		got = append(got, ph.Steps[0].Connection+"/"+ph.Steps[0].Labels[LabelVariant])
		if ph.Steps[0].Labels[LabelVariant] == VariantNodeHTB && (len(ph.Changes) != 1 || ph.Changes[0].What != suite.CapNodeQdisc || ph.Changes[0].Member != "node2") {
			t.Errorf("node-htb changes %+v", ph.Changes)
		}
	}
	if want := "pod-pod same node/as-is pod-pod cross node/as-is pod-pod cross node/node-htb"; strings.Join(got, " ") != want {
		t.Errorf("phases %q, want %q", strings.Join(got, " "), want)
	}
	o.Set["placements"] = "same-node"
	o.Set["variants"] = "node-htb"
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), o, caps); err == nil || !strings.Contains(err.Error(), "within a node") {
		t.Errorf("node-htb within a node: %v", err)
	}
	o.Set["placements"] = "same-node,elsewhere"
	if err := (Suite{}).CheckOptions(o); err == nil || !strings.Contains(err.Error(), `placement "elsewhere"`) {
		t.Errorf("bad placement: %v", err)
	}
	// The lab keeps its defaults: cross node, its backend's variants.
	lab, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Backend: "host-gw", Set: map[string]string{"markings": "none,EF"}}, suitetest.LabCaps())
	if err != nil || len(lab) != len(DefaultVariants(suite.Caps{})) || lab[0].Steps[0].Connection != suite.PodPodCrossNode {
		t.Errorf("lab plan: %v, %d phases", err, len(lab))
	}
}

// TestQoSVerdictsPerPlacement: the two placements of a variant get a
// verdict each, and a verdict says whether the marks arrived.
func TestQoSVerdictsPerPlacement(t *testing.T) {
	none, ef := DefaultMarkings()[0], DefaultMarkings()[3]
	q := Options{Markings: []Marking{none, ef}}.withDefaults()
	agents := suitetest.LabAgents()
	var outs []suite.Outcome
	for _, c := range []struct {
		pair     suite.Pair
		conn     string
		p99      [2]float64
		received int
	}{
		{suite.Pair{Src: agents[1], Dst: agents[0]}, suite.PodPodSameNode, [2]float64{0.2, 0.15}, 46},
		{suite.Pair{Src: agents[2], Dst: agents[0]}, suite.PodPodCrossNode, [2]float64{12, 0.3}, 0},
	} {
		steps := qosSteps(q, VariantAsIs, 0, []Marking{none, ef}, c.pair, c.conn, "vxlan")
		outs = append(outs, suite.Outcome{Step: steps[0], Result: &probe.Result{ThroughputBps: &probe.SenderReceiver{Sender: 2e9, Receiver: 1e9}}})
		for i := range 2 {
			outs = append(outs,
				suite.Outcome{Step: steps[1+2*i], Result: &probe.Result{LatencyMs: &probe.Summary{P99: c.p99[i], Count: 100}, DSCPReceived: probe.Int(c.received * i)}},
				suite.Outcome{Step: steps[2+2*i], Result: &probe.Result{RTTms: &probe.Summary{Avg: 0.1, Count: 100}}})
		}
	}
	rows := Suite{}.Rows(outs)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 2 per placement", len(rows))
	}
	vs := Verdicts(rows)
	if len(vs) != 2 || vs[0].Connection != suite.PodPodSameNode || vs[1].Connection != suite.PodPodCrossNode {
		t.Fatalf("verdicts %+v", vs)
	}
	if want := "no effect: no queue builds on the path as it is (p99 unmarked 0.200 ms, EF 0.150 ms); the marks arrived (EF received as EF)"; vs[0].Text != want {
		t.Errorf("same node: %q, want %q", vs[0].Text, want)
	}
	if want := "priority protected the marked flow (EF): p99 12.0 ms → 0.300 ms; the marks did not arrive (EF sent, BE received)"; vs[1].Text != want {
		t.Errorf("cross node: %q, want %q", vs[1].Text, want)
	}
	for _, r := range rows {
		if _, ok := r.Labels[labelPlacement]; ok {
			t.Errorf("row %v keeps the internal placement label", r.Labels)
		}
		if want := map[string]string{suite.PodPodSameNode: PlacementSameNode, suite.PodPodCrossNode: PlacementCrossNode}[r.Connection]; r.Texts[labelPlacement] != want {
			t.Errorf("row on %s carries placement %q, want %q", r.Connection, r.Texts[labelPlacement], want)
		}
	}
	if txt := reporttest.Text(t, Suite{}, rows); !strings.Contains(txt, "as-is (pod-pod cross node): priority protected") || !strings.Contains(txt, suite.PodPodCrossNode+" ") {
		t.Errorf("table:\n%s", txt)
	}
}

// TestBackgroundAndHistogramKeys: background-marking and background-flows
// shape the background steps (UDP: flows sharing the rate; TCP: streams
// of one task), hist-bin and hist-bins the foregrounds' histogram; too
// many UDP flows for the sender's agent are refused.
func TestBackgroundAndHistogramKeys(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Backend: "host-gw", Set: map[string]string{"variants": "fifo", "markings": "none,0x10",
		"background-marking": "EF", "background-flows": "2", "hist-bin": "5us", "hist-bins": "200"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	var bg, fg []suite.Step
	for _, st := range phases[0].Steps {
		switch st.Measure {
		case MeasureBackground:
			bg = append(bg, st)
		case MeasureForeground:
			fg = append(fg, st)
		}
	}
	if len(bg) != 2 {
		t.Fatalf("%d background steps, want 2", len(bg))
	}
	for _, st := range bg {
		if st.Spec.TOS == nil || *st.Spec.TOS != 46<<2 || *st.Spec.RateBps != 1e9 {
			t.Errorf("background flow: tos %v rate %v, want EF at half the 2 Gbit/s background", st.Spec.TOS, st.Spec.RateBps)
		}
	}
	for _, st := range fg {
		if st.Spec.HistBinWidth.D() != 5*time.Microsecond || st.Spec.HistBins != 200 {
			t.Errorf("foreground histogram %v x %d", st.Spec.HistBinWidth.D(), st.Spec.HistBins)
		}
	}
	o.Set["background"] = "tcp"
	o.Set["background-flows"] = "3"
	tcp, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil || tcp[0].Steps[0].Spec.Kind != probe.KindTCP || tcp[0].Steps[0].Spec.Streams != 3 || tcp[1-1].Steps[1].Measure == MeasureBackground {
		t.Errorf("tcp background of 3 flows: %v %+v", err, tcp[0].Steps[0].Spec)
	}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"background-flows", "3"}, "more than an agent's 4"},
		{[]string{"background-flows", "0"}, "at least 1"},
		{[]string{"background-marking", "dscp:99"}, "0-63"},
		{[]string{"hist-bin", "5"}, "want a duration"},
		{[]string{"hist-bin", "100ns"}, "want 1us to 10ms"},
		{[]string{"hist-bins", "many"}, "whole number"},
	} {
		bad := suite.Options{Time: 2 * time.Second, Repeat: 1, Backend: "host-gw", Set: map[string]string{c.kv[0]: c.kv[1]}}
		if _, err := (Suite{}).Plan(suitetest.LabAgents(), bad, suitetest.LabCaps()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.kv, err, c.want)
		}
	}
}

// TestRowsMergeHistogramsAndSumBackground: a row's histogram is the sum
// of its repetitions', bin by bin; the background's throughput the sum of
// its flows'; the foreground's throughput and transfer are in the row.
func TestRowsMergeHistogramsAndSumBackground(t *testing.T) {
	none, ef := DefaultMarkings()[0], DefaultMarkings()[3]
	q := Options{Markings: []Marking{none, ef}, BackgroundFlows: 2}.withDefaults()
	var outs []suite.Outcome
	for rep, counts := range [][]int64{{150, 48, 2}, {100, 90, 10, 1}} {
		steps := qosSteps(q, VariantFIFO, rep, []Marking{none, ef}, suite.Pair{Src: suitetest.LabAgents()[2], Dst: suitetest.LabAgents()[0]}, suite.PodPodCrossNode, "host-gw")
		for _, st := range steps {
			res := &probe.Result{}
			switch st.Measure {
			case MeasureBackground:
				res = &probe.Result{ThroughputBps: &probe.SenderReceiver{Sender: 1e9, Receiver: 0.5e9}, LossPct: probe.Float(50)}
			case MeasureForeground:
				res = &probe.Result{LatencyMs: &probe.Summary{P99: 11}, ThroughputBps: &probe.SenderReceiver{Sender: 80e3, Receiver: 79e3},
					Bytes: &probe.SenderReceiver{Sender: 20000, Receiver: 19750}, Histogram: &probe.Histogram{BinWidthUs: 100, Counts: counts}}
			case suite.MeasurePing:
				res = &probe.Result{RTTms: &probe.Summary{Avg: 11}}
			}
			outs = append(outs, suite.Outcome{Step: st, Result: res})
		}
	}
	rows := Suite{}.Rows(outs)
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[1]
	if got, want := r.Series["latency_histogram"], []float64{250, 138, 12, 1}; !slices.Equal(got, want) {
		t.Errorf("merged histogram %v, want %v", got, want)
	}
	for k, want := range map[string]float64{"latency_histogram_repetitions": 2, "latency_histogram_bin_us": 100, "background_throughput_bps": 1e9,
		"background_flows": 2, "background_loss_pct": 50, "background_dscp": 0, "throughput_bps.receiver": 79e3, "bytes.sender": 20000} {
		if r.Median[k] != want {
			t.Errorf("%s = %v, want %v", k, r.Median[k], want)
		}
	}
}
