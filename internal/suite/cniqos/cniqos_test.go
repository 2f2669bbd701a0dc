package cniqos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/connect"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// noFq is what kernel detection reports on a kernel without the fq qdisc.
const noFq = "fq qdisc not supported by this kernel: Specified qdisc kind is unknown"

// clusterCaps are a cluster's capabilities with the CNI named and the
// nodes' tc features detected (fq as given).
func clusterCaps(cni, version, kernel, fq string) suite.Caps {
	return suite.Caps{AsIs: true, PathMTU: 1450, Have: []suite.Cap{suite.CapPodAnnotate},
		CNI:      suite.CNIInfo{Name: cni, Version: version, Kernel: kernel},
		KernelTC: map[string]string{"tbf": "", "ingress": "", "mirred": "", "u32": "", "police": "", "fq": fq}}
}

// agents: two pods on each of two nodes, a host-network agent on each.
func agents() []suite.Endpoint {
	var out []suite.Endpoint
	for _, n := range []string{"node1", "node2"} {
		for _, name := range []string{"pod", "pod-b"} {
			out = append(out, suite.Endpoint{ID: n + name, Name: n + "-" + name, Node: n, IP: "10.0.0.1", ResponderAddr: "10.0.0.1:5201"})
		}
		out = append(out, suite.Endpoint{ID: n + "host", Name: n + "-host", Node: n, IP: "10.250.0.1", ResponderAddr: "10.250.0.1:5201", HostNetwork: true})
	}
	return out
}

// TestTableIsWhole: every row of the table can be planned or refused
// with a reason: a kind, a way to ask, one row per name, and the facts
// the issue names (Calico's annotations, Flannel's single row).
func TestTableIsWhole(t *testing.T) {
	kinds := []string{ClassBandwidth, ClassPacketRate, ClassDSCP, ClassPriority, ClassConnections, ClassNone, ClassTunnelMark}
	seen := map[string]bool{}
	for _, f := range Table {
		key := f.CNI + "/" + f.Name
		if seen[key] {
			t.Errorf("%s twice", key)
		}
		seen[key] = true
		if !slices.Contains(kinds, f.Class) {
			t.Errorf("%s: class %q", key, f.Class)
		}
		switch {
		case f.Class == ClassNone:
		case f.Via == ViaAnnotation && len(f.Set) == 0 && f.From != "":
			t.Errorf("%s: asked for by annotation but sets none", key)
		case f.Via == ViaResource && f.Resource == "":
			t.Errorf("%s: asked for by a resource but names none", key)
		case f.Via == ViaDatapath && (len(f.Set) > 0 || f.Resource != ""):
			t.Errorf("%s: the datapath as made, yet something is asked for", key)
		case f.Via != ViaAnnotation && f.Via != ViaResource && f.Via != ViaDatapath:
			t.Errorf("%s: via %q", key, f.Via)
		}
		if (f.Class == ClassBandwidth || f.Class == ClassPacketRate) && f.Value <= 0 {
			t.Errorf("%s: a limit without its value", key)
		}
	}
	var calico []string
	for _, f := range For("calico") {
		for k := range f.Set {
			calico = append(calico, k)
		}
	}
	for _, k := range []string{"ingressBandwidth", "egressBandwidth", "ingressPacketRate", "egressPacketRate", "dscp"} {
		if !slices.Contains(calico, "qos.projectcalico.org/"+k) {
			t.Errorf("calico: no feature sets qos.projectcalico.org/%s", k)
		}
	}
	if fl := For("flannel"); len(fl) != 2 || fl[0].Class != ClassNone || fl[1].Class != ClassTunnelMark {
		t.Errorf("flannel: %+v, want its row of class none and the mark across its tunnel", fl)
	}
}

// TestTryable: what cannot be tried is named with what it lacks,
// detected: the kernel's missing fq, an old kernel or CNI, features not
// tried for, a resource cnperf does not create.
func TestTryable(t *testing.T) {
	feat := func(cni, name string) Feature {
		i := slices.IndexFunc(Table, func(f Feature) bool { return f.CNI == cni && f.Name == name })
		if i < 0 {
			t.Fatalf("no %s/%s", cni, name)
		}
		return Table[i]
	}
	for _, c := range []struct {
		name string
		f    Feature
		caps suite.Caps
		want string // "" tryable
	}{
		{"calico bandwidth", feat("calico", "egressBandwidth"), clusterCaps("calico", "v3.31.0", "6.18.44", noFq), ""},
		{"calico dscp", feat("calico", "dscp"), clusterCaps("calico", "v3.31.0", "6.18.44", noFq), ""},
		{"calico too old", feat("calico", "dscp"), clusterCaps("calico", "v3.30.2", "6.18.44", ""), "older than v3.31.0"},
		{"calico connections", feat("calico", "egressMaxConnections"), clusterCaps("calico", "v3.31.0", "6.18.44", ""), ""},
		{"cilium bandwidth manager without fq", feat("cilium", "bandwidth-manager"), clusterCaps("cilium", "v1.20.2", "6.18.44", noFq), "lacks fq: " + noFq},
		{"cilium priority without fq", feat("cilium", "priority"), clusterCaps("cilium", "v1.20.2", "6.18.44", noFq), "lacks fq"},
		{"cilium priority on an old kernel", feat("cilium", "priority"), clusterCaps("cilium", "v1.20.2", "6.6.1", ""), "kernel 6.6.1 is older than 6.7"},
		{"cilium priority with fq", feat("cilium", "priority"), clusterCaps("cilium", "v1.20.2", "6.7.0", ""), ""},
		{"cilium bandwidth plugin", feat("cilium", "bandwidth-plugin"), clusterCaps("cilium", "v1.20.2", "6.18.44", noFq), ""},
		{"cilium egress dscp", feat("cilium", "egress-dscp"), clusterCaps("cilium", "v1.20.2", "6.18.44", ""), "no cilium release has it"},
		{"kernel not tried", feat("cilium", "bandwidth-manager"), suite.Caps{Have: []suite.Cap{suite.CapPodAnnotate}}, "not tried for fq"},
		{"no annotated pods", feat("calico", "dscp"), suite.Caps{Why: map[suite.Cap]string{suite.CapPodAnnotate: "the lab has no CNI"}}, "the lab has no CNI"},
		{"ovn resource", feat("ovn-kubernetes", "NetworkQoS"), suite.Caps{KernelTC: map[string]string{"openvswitch": ""}}, "does not create NetworkQoS"},
		{"flannel", feat("flannel", "none"), clusterCaps("flannel", "", "6.18.44", ""), "no QoS of its own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok, why := Tryable(c.f, c.caps)
			if c.want == "" && !ok {
				t.Errorf("refused: %s", why)
			}
			if c.want != "" && (ok || !strings.Contains(why, c.want)) {
				t.Errorf("tryable %v, %q; want refused with %q", ok, why, c.want)
			}
		})
	}
}

func TestVerdicts(t *testing.T) {
	f := probe.Float
	for _, c := range []struct {
		name string
		got  Judgement
		want string
		says string
	}{
		{"held from the start", Bandwidth(95e6, 97e6, 96e6, f(0), "Calico Felix"), Works, "held at 96.0 Mbit/s"},
		{"held after the burst", Bandwidth(95e6, 2000e6, 96e6, f(2.1), "Calico Felix"), Caveat, "after 2.1 s"},
		{"never conformed", Bandwidth(95e6, 2000e6, 120e6, nil, ""), Caveat, "not within 10 %"},
		{"below the limit", Bandwidth(95e6, 50e6, 50e6, f(0), ""), Caveat, "held below"},
		{"bypassed", Bandwidth(95e6, 2000e6, 2000e6, nil, ""), NoEffect, "no limit found"},
		{"made but bypassed", Bandwidth(95e6, 2000e6, 2000e6, nil, "CNI bandwidth plugin"), NoEffect, "did not pass through it"},
		{"pps held", PacketRate(1000, 20000, 1010), Works, "held at 1010 packets/s (+1.0 %, within 10 %)"},
		{"pps not limited", PacketRate(1000, 20000, 19000), NoEffect, "not limited"},
		{"pps loose", PacketRate(1000, 20000, 1300), Caveat, "+30 %"},
		{"pps nothing", PacketRate(1000, 20000, 0), NoEffect, "nothing arrived"},
		{"pps flood too small", PacketRate(1000, 1500, 990), Caveat, "sent only 1500 packets/s"},
		{"connections held", Connections(10, 20, 10, 10, 0), Works, "held within 2: 10 of 20 connections open at once against 10 asked (10 reset, 0 timed out)"},
		{"connections with the agent's", Connections(10, 20, 8, 12, 0), Works, "8 of 20"},
		{"connections not limited", Connections(10, 20, 20, 0, 0), NoEffect, "not limited"},
		{"connections loose", Connections(10, 20, 15, 5, 0), Caveat, "more than the limit"},
		{"connections none", Connections(10, 20, 0, 0, 20), Caveat, "held below the limit: 0 of 20"},
		{"dscp leaving", DSCP(34, probe.Int(34), probe.Int(0)), Works, "pod to pod it arrived as 0 (unmarked)"},
		{"dscp lost", DSCP(34, probe.Int(0), probe.Int(0)), NoEffect, "as 0, not 34"},
		{"dscp nothing", DSCP(34, nil, nil), NoEffect, "no traffic"},
		{"priority", Priority(10, 1), Works, "1.00 ms"},
		{"priority weak", Priority(10, 8), Caveat, "only 20 %"},
		{"priority none", Priority(10, 10), NoEffect, "10.00 ms"},
	} {
		if c.got.Verdict != c.want || !strings.Contains(c.got.Why, c.says) {
			t.Errorf("%s: %+v, want %s saying %q", c.name, c.got, c.want, c.says)
		}
	}
}

// TestPlanCalico: each tryable feature is a phase whose change puts its
// annotations on a pod standing in for the source; ingress limits flow
// towards it; DSCP goes to the host-network agent on the other node and
// to a pod there; the connection limit holds twice its connections
// open. A lab (no CNI named) is refused.
func TestPlanCalico(t *testing.T) {
	o := suite.Options{Time: 8 * time.Second, Repeat: 1, Backend: "direct"}
	phases, err := Suite{}.Plan(agents(), o, clusterCaps("calico", "v3.31.0", "6.18.44", noFq))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]suite.Phase{}
	for _, ph := range phases {
		if len(ph.Steps) == 0 {
			t.Errorf("phase %s has no steps", ph.Name)
		}
		for _, st := range ph.Steps {
			byName[st.Labels[LabelFeature]+"/"+st.Labels[labelRole]] = ph
		}
	}
	eg := byName["egressBandwidth/flow"]
	if len(eg.Changes) != 1 || eg.Changes[0].What != suite.CapPodAnnotate || eg.Changes[0].PodAnnotations["qos.projectcalico.org/egressBandwidth"] != "100M" || eg.Changes[0].Member != "node1-pod" {
		t.Errorf("egressBandwidth change %+v", eg.Changes)
	}
	if st := eg.Steps[0]; st.Src.Name != "node1-pod" || st.Dst.Node != "node2" || st.Spec.Kind != probe.KindTCP {
		t.Errorf("egress flow %s -> %s %s", st.Src.Name, st.Dst.Name, st.Spec.Kind)
	}
	if st := byName["ingressBandwidth/flow"].Steps[0]; st.Dst.Name != "node1-pod" || st.Src.Node != "node2" {
		t.Errorf("ingress flow %s -> %s, want towards the annotated pod", st.Src.Name, st.Dst.Name)
	}
	// The packet-rate flood sends real datagrams: a limit in netfilter
	// counts a GSO super-packet as one. The limit's bucket is asked for
	// beside it (Calico's default of 5 packets loses tokens to a busy
	// sender's pauses).
	for _, dir := range []string{"egress", "ingress"} {
		ph := byName[dir+"PacketRate/flow"]
		if st := ph.Steps[0]; st.Spec.Kind != probe.KindUDP || *st.Spec.RateBps != offeredPPS*ppsSize*8 || st.Spec.Offload != probe.OffloadOff {
			t.Errorf("%s: %+v, want UDP at %d packets/s with offload off", dir, st.Spec, offeredPPS)
		}
		if set := ph.Changes[0].PodAnnotations; set["qos.projectcalico.org/"+dir+"PacketRate"] != "1000" || set["qos.projectcalico.org/"+dir+"PacketBurst"] != "100" {
			t.Errorf("%s packet rate asked for with %v, want a rate of 1000 and a burst of 100", dir, set)
		}
	}
	dscp := byName["dscp/leaving"]
	// Each flow with its watches on both nodes' wire.
	if len(dscp.Steps) != 6 || !dscp.Steps[0].Dst.HostNetwork || dscp.Steps[0].Dst.Node != "node2" || dscp.Steps[3].Dst.HostNetwork ||
		dscp.Steps[1].Spec.Kind != probe.KindWire || dscp.Steps[4].Spec.Watch == nil || dscp.Steps[4].Spec.Watch.SrcPort == dscp.Steps[1].Spec.Watch.SrcPort {
		t.Errorf("dscp steps %+v", dscp.Steps)
	}
	// The connection limit: twice the limit of connects from the
	// annotated pod, held open, a spec the connect probe accepts.
	conns := byName["egressMaxConnections/flow"]
	if len(conns.Changes) != 1 || conns.Changes[0].PodAnnotations["qos.projectcalico.org/egressMaxConnections"] != "10" || len(conns.Steps) != 1 {
		t.Fatalf("connections: %+v", conns)
	}
	if st := conns.Steps[0]; st.Src.Name != "node1-pod" || st.Spec.Kind != probe.KindConnect || st.Spec.Count != 20 {
		t.Errorf("connections step %s -> %s %+v, want 20 connects from the annotated pod", st.Src.Name, st.Dst.Name, st.Spec)
	} else if err := (connect.Prober{}).Validate(st.Spec); err != nil {
		t.Errorf("connections spec: %v", err)
	}
	if _, err := (Suite{}).Plan(agents(), o, suitetest.LabCaps()); err == nil || !strings.Contains(err.Error(), "CNI is not known") {
		t.Errorf("lab: %v, want refused", err)
	}
	if _, err := (Suite{}).Plan(agents(), suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"features": "bogus"}}, clusterCaps("calico", "", "", "")); err == nil || !strings.Contains(err.Error(), `no feature "bogus"`) {
		t.Errorf("bogus feature: %v", err)
	}
}

// TestCiliumRows: on a kernel without fq the Bandwidth Manager and
// priority rows say they cannot be tried, naming fq; the bandwidth
// plugin is tried, and a flow that passes a 100M limit at 2 Gbit/s reads
// as a verdict of no effect (the bypass), from the outcomes alone.
func TestCiliumRows(t *testing.T) {
	o := suite.Options{Time: 4 * time.Second, Repeat: 1, Backend: "native"}
	phases, err := Suite{}.Plan(agents(), o, clusterCaps("cilium", "v1.20.2", "6.18.44", noFq))
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []suite.Outcome
	for _, ph := range phases {
		for _, st := range ph.Steps {
			oc := suite.Outcome{Step: st, Result: &probe.Result{Kind: st.Spec.Kind}}
			if st.Labels[labelRole] == roleFlow {
				for i := 0; i < 40; i++ {
					oc.Result.Intervals = append(oc.Result.Intervals, probe.Interval{StartS: float64(i) / 10, EndS: float64(i+1) / 10, ThroughputBps: 2e9})
				}
			}
			outcomes = append(outcomes, oc)
		}
	}
	rows := Suite{}.Rows(outcomes)
	got := map[string]suite.Row{}
	for _, r := range rows {
		got[r.Labels[LabelFeature]] = r
	}
	for _, name := range []string{"bandwidth-manager", "priority"} {
		if r := got[name]; r.Labels[LabelVerdict] != Untried || !strings.Contains(r.Labels[LabelWhy], "lacks fq") {
			t.Errorf("%s: %v", name, r.Labels)
		}
	}
	if r := got["bandwidth-plugin"]; r.Labels[LabelVerdict] != NoEffect || r.Median["steady_state_bps"] != 2e9 {
		t.Errorf("bandwidth-plugin: %v %v", r.Labels, r.Median)
	}
	if r := got["egress-dscp"]; r.Labels[LabelVerdict] != Untried {
		t.Errorf("egress-dscp: %v", r.Labels)
	}
	if len(rows) != len(For("cilium")) {
		t.Errorf("%d rows, want one per cilium feature (%d)", len(rows), len(For("cilium")))
	}
}

// TestCalicoRows: the rows of Calico's features from measured outcomes.
func TestCalicoRows(t *testing.T) {
	o := suite.Options{Time: 4 * time.Second, Repeat: 1}
	phases, err := Suite{}.Plan(agents(), o, clusterCaps("calico", "v3.31.0", "6.18.44", noFq))
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []suite.Outcome
	for _, ph := range phases {
		for _, st := range ph.Steps {
			r := &probe.Result{Kind: st.Spec.Kind}
			switch st.Labels[LabelClass] + "/" + st.Labels[labelRole] {
			case "bandwidth/flow":
				for i := 0; i < 40; i++ {
					v := 94e6
					if i < 10 {
						v = 2e9
					}
					r.Intervals = append(r.Intervals, probe.Interval{StartS: float64(i) / 10, EndS: float64(i+1) / 10, ThroughputBps: v})
				}
			case "packet-rate/flow":
				r.PPS, r.DurationS = probe.Float(1004), 4
				r.Packets = &probe.PacketCounts{Sent: 4 * 15000, Received: 4 * 1004}
			case "connections/flow":
				r.Connects = &probe.ConnectTimeline{Attempts: 20, Outcomes: map[string]int{probe.ConnectOK: 10, probe.ConnectRefused: 10}, Held: probe.Int(10)}
			case "dscp/leaving":
				r.DSCPReceived = probe.Int(34)
			case "dscp/pod":
				r.DSCPReceived = probe.Int(0)
			case "dscp/wire":
				// Marked leaving the cluster, not to a pod (over VXLAN).
				w := probe.WireDirection{Packets: 10, Encap: "none", Outer: probe.Int(34)}
				if st.Labels[labelWireOf] == rolePod {
					w = probe.WireDirection{Packets: 10, Encap: "vxlan", Outer: probe.Int(0), Inner: probe.Int(0)}
				}
				r.WireDSCP = &probe.WireDSCP{WireDirection: w}
			}
			outcomes = append(outcomes, suite.Outcome{Step: st, Result: r})
		}
	}
	for _, r := range (Suite{}).Rows(outcomes) {
		if r.Labels[LabelClass] == ClassPacketRate && r.Median["offered_pps"] != 15000 {
			t.Errorf("%s: offered %v packets/s, want the 15000 the sender counted", r.Labels[LabelFeature], r.Median["offered_pps"])
		}
	}
	want := map[string]string{"egressBandwidth": Caveat, "ingressBandwidth": Caveat, "egressPacketRate": Works, "ingressPacketRate": Works, "dscp": Works, "egressMaxConnections": Works,
		"tunnel-mark": Untried}
	for _, r := range (Suite{}).Rows(outcomes) {
		f := r.Labels[LabelFeature]
		if r.Labels[LabelVerdict] != want[f] {
			t.Errorf("%s: %s (%s), want %s", f, r.Labels[LabelVerdict], r.Labels[LabelWhy], want[f])
		}
		if f == "dscp" && (r.Median["wire_dscp.leaving.outer"] != 34 || r.Median["wire_dscp.pod.inner"] != 0 ||
			!strings.Contains(r.Labels[LabelWhy], "on the sending node's wire: leaving outer 34, to a pod outer 0 inner 0")) {
			t.Errorf("dscp: the marks on the wire not in the row: %v %v", r.Labels[LabelWhy], r.Median)
		}
		delete(want, f)
	}
	if len(want) > 0 {
		t.Errorf("no rows for %v", want)
	}
}

// TestTunnelMark: on a VXLAN mode the mark a pod sets itself is watched
// on both nodes' wire (qos-priority's watch), and where the outer header
// loses it the row names what carries it. Calico without the node
// opt-in: the remedy row says tos inherit carries it and how to opt in;
// with it, a phase applies tos inherit on both nodes and its row says
// whether the outer header then carried the mark. Cilium's metadata-mode
// tunnel: no tos inherit remedy, and no setting of Cilium carries it.
// Without a tunnel the feature cannot be tried.
func TestTunnelMark(t *testing.T) {
	vxlanCaps := func(cni string, optIn bool, metadata ...string) suite.Caps {
		c := clusterCaps(cni, "v3.31.0", "6.18.44", noFq)
		if cni == "cilium" {
			c.CNI.Version = "v1.20.2"
		}
		c.Encap, c.MetadataTunnels = suite.EncapVXLAN, metadata
		c.Why = map[suite.Cap]string{suite.CapVXLANTOS: "opt in with --set allow-node-qdisc=true"}
		if optIn {
			c.Have, c.Why = append(c.Have, suite.CapVXLANTOS), nil
		}
		if len(metadata) > 0 {
			c.Why = map[suite.Cap]string{suite.CapVXLANTOS: "metadata mode"}
		}
		return c
	}
	// run plans tunnel-mark and answers: outer as given without tos
	// inherit, the mark itself with it.
	run := func(t *testing.T, caps suite.Caps, outer int) (map[string]suite.Row, []suite.Phase) {
		o := suite.Options{Time: time.Second, Repeat: 1, Backend: "vxlan", Set: map[string]string{"features": "tunnel-mark"}}
		phases, err := Suite{}.Plan(agents(), o, caps)
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []suite.Outcome
		for _, ph := range phases {
			inherit := len(ph.Changes) > 0
			for _, st := range ph.Steps {
				r := &probe.Result{Kind: st.Spec.Kind}
				switch {
				case st.Measure == "wire":
					o := outer
					if inherit {
						o = 46
					}
					r.WireDSCP = &probe.WireDSCP{WireDirection: probe.WireDirection{Packets: 10, Encap: "vxlan", Outer: probe.Int(o), Inner: probe.Int(46)}}
				case st.Labels[labelRole] == roleFlow:
					r.DSCPReceived = probe.Int(46)
				}
				outcomes = append(outcomes, suite.Outcome{Step: st, Result: r})
			}
		}
		got := map[string]suite.Row{}
		for _, r := range (Suite{}).Rows(outcomes) {
			got[r.Labels[LabelFeature]] = r
		}
		return got, phases
	}
	t.Run("calico without the opt-in", func(t *testing.T) {
		got, _ := run(t, vxlanCaps("calico", false), 0)
		r := got["tunnel-mark"]
		if r.Labels[LabelVerdict] != NoEffect || !strings.Contains(r.Labels[LabelWhy], "mark lost at encapsulation (outer 0, inner 46)") ||
			!strings.Contains(r.Labels[LabelWhy], "tos inherit on vxlan.calico carries it") || r.Median["wire_dscp.outer"] != 0 || r.Median["wire_dscp.inner"] != 46 {
			t.Errorf("tunnel-mark: %v %v", r.Labels, r.Median)
		}
		rem := got["tunnel-mark"+RemedySuffix]
		if rem.Labels[LabelVerdict] != Untried || !strings.Contains(rem.Labels[LabelWhy], "allow-node-qdisc=true") {
			t.Errorf("remedy: %v", rem.Labels)
		}
	})
	t.Run("calico with the opt-in", func(t *testing.T) {
		got, phases := run(t, vxlanCaps("calico", true), 0)
		var tos []string
		for _, ph := range phases {
			for _, c := range ph.Changes {
				if c.What == suite.CapVXLANTOS {
					tos = append(tos, c.Member)
				}
			}
		}
		if !slices.Equal(tos, []string{"node1", "node2"}) {
			t.Errorf("tos inherit on %v, want both nodes", tos)
		}
		rem := got["tunnel-mark"+RemedySuffix]
		if rem.Labels[LabelVerdict] != Works || !strings.Contains(rem.Labels[LabelWhy], "mark on the wire (outer 46)") || rem.Median["wire_dscp.outer"] != 46 {
			t.Errorf("remedy: %v %v", rem.Labels, rem.Median)
		}
	})
	t.Run("cilium metadata-mode tunnel", func(t *testing.T) {
		got, phases := run(t, vxlanCaps("cilium", true, "cilium_vxlan"), 0)
		for _, ph := range phases {
			if len(ph.Changes) > 0 {
				t.Errorf("phase %s changes %v: no device setting works here", ph.Name, ph.Changes)
			}
		}
		r, rem := got["tunnel-mark"], got["tunnel-mark"+RemedySuffix]
		if r.Labels[LabelVerdict] != NoEffect || strings.Contains(r.Labels[LabelWhy], "tos inherit on") || !strings.Contains(r.Labels[LabelWhy], "cilium_vxlan is a metadata-mode VXLAN device") {
			t.Errorf("tunnel-mark: %v", r.Labels)
		}
		if rem.Labels[LabelVerdict] != None || !strings.Contains(rem.Labels[LabelWhy], "no setting of Cilium carries it") {
			t.Errorf("remedy: %v", rem.Labels)
		}
	})
	t.Run("flannel, the mark on the wire", func(t *testing.T) {
		got, _ := run(t, vxlanCaps("flannel", false), 46)
		if r := got["tunnel-mark"]; r.Labels[LabelVerdict] != Works || !strings.Contains(r.Labels[LabelWhy], "outer 46") {
			t.Errorf("tunnel-mark: %v", r.Labels)
		}
	})
	t.Run("no tunnel", func(t *testing.T) {
		caps := vxlanCaps("calico", true)
		caps.Encap = suite.EncapNone
		got, _ := run(t, caps, 46)
		if r := got["tunnel-mark"]; r.Labels[LabelVerdict] != Untried || !strings.Contains(r.Labels[LabelWhy], "no tunnel") {
			t.Errorf("tunnel-mark: %v", r.Labels)
		}
	})
}
