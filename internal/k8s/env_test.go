package k8s

import (
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// TestRewriteStandsInTheShapedPod: once the shaped pod runs, it takes the
// place of the pod the change named in the phase's steps, and the steps
// carry the burst the CNI chose.
func TestRewriteStandsInTheShapedPod(t *testing.T) {
	shaped := suite.Endpoint{ID: "u-shaped", Name: "cnperf-shaped-x", Node: "n2", IP: "10.0.2.9", ResponderAddr: "10.0.2.9:5201"}
	applied := &suite.Applied{By: "CNI", QoS: &qosspec.Spec{Setup: qosspec.SpecBandwidth, EgressRateBps: 10e6, EgressBurstBytes: 536870911}}
	e := &Env{standIns: map[string]suite.Endpoint{"u-pod": shaped}, applied: applied}
	pod := suite.Endpoint{ID: "u-pod", Name: "cnperf-agent-b", Node: "n2"}
	peer := suite.Endpoint{ID: "u-peer", Name: "cnperf-agent-a", Node: "n1"}
	for _, st := range []suite.Step{
		{Connection: "pod cnperf-agent-b egress", Src: pod, Dst: peer},
		{Connection: "pod cnperf-agent-b ingress", Src: peer, Dst: pod},
	} {
		got := e.Rewrite(st)
		if (got.Src.ID != "u-shaped" && got.Dst.ID != "u-shaped") || got.Applied != applied || got.Connection == st.Connection {
			t.Errorf("rewritten %+v", got)
		}
	}
	if got := e.Rewrite(suite.Step{Src: peer, Dst: peer}); got.Applied != nil || got.Src.ID != "u-peer" {
		t.Errorf("a step without the shaped pod changed: %+v", got)
	}
}

// TestRewriteWatchesTheStandIn: a wire watch of the stood-in pod's flow
// (on a host agent, by address) looks for the stand-in's address; the
// step's own watch is not changed in place.
func TestRewriteWatchesTheStandIn(t *testing.T) {
	e := &Env{}
	e.standIn("10.0.2.5", "10.0.2.9")
	host := suite.Endpoint{ID: "u-host", Name: "cnperf-agent-host-a", Node: "n2", HostNetwork: true}
	w := &probe.WatchFlow{Proto: "udp", Src: "10.0.2.5", Dst: "10.0.1.7", SrcPort: 61000, DstPort: 5201}
	got := e.Rewrite(suite.Step{Src: host, Dst: host, Spec: probe.Spec{Kind: probe.KindWire, Watch: w}})
	if got.Spec.Watch == nil || got.Spec.Watch.Src != "10.0.2.9" || got.Spec.Watch.Dst != "10.0.1.7" || got.Spec.Watch.SrcPort != 61000 || w.Src != "10.0.2.5" {
		t.Errorf("watch %+v (the step's own %+v), want the stand-in's address as the source", got.Spec.Watch, w)
	}
}

func TestQuantity(t *testing.T) {
	for in, want := range map[uint64]string{0: "", 10e6: "10M", 1e9: "1G", 500e3: "500k", 12345: "12345"} {
		if got := quantity(in); got != want {
			t.Errorf("quantity(%d) = %q, want %q", in, got, want)
		}
		if in != 0 {
			if back, err := qosspec.ParseBandwidth(quantity(in)); err != nil || back != in {
				t.Errorf("%q reads back as %d, %v", quantity(in), back, err)
			}
		}
	}
}

func TestCapsRefuseWhatIsNotBuilt(t *testing.T) {
	caps := (&Env{Sets: AgentSets{Host: true, QoS: true}}).Caps()
	err := caps.Lacks("qos-priority", suite.CapNodeQdisc, suite.CapPodShaping)
	if err == nil || !caps.Has(suite.CapPodShaping) {
		t.Fatalf("caps %+v: %v", caps, err)
	}
	if le, ok := err.(*suite.LacksError); !ok || len(le.Missing) != 1 || le.Missing[0] != suite.CapNodeQdisc {
		t.Errorf("err %v", err)
	}
}

// TestShaperOf: who made a shaped pod's qdiscs, read off its devices.
func TestShaperOf(t *testing.T) {
	tbf := []Qdisc{{Kind: "tbf", Parent: "root", RateBps: 10e6}}
	for _, tc := range []struct {
		name  string
		links []LinkTC
		want  string
	}{
		{"felix egress", []LinkTC{{Name: "cali1234", Qdiscs: []Qdisc{{Kind: "ingress"}}, RedirectTo: "bwcali1234"}, {Name: "bwcali1234", Type: "ifb", Qdiscs: tbf}}, "Calico Felix"},
		{"felix ingress", []LinkTC{{Name: "cali1234", Qdiscs: tbf}}, "Calico Felix"},
		{"plugin egress", []LinkTC{{Name: "veth12", Qdiscs: []Qdisc{{Kind: "ingress"}}, RedirectTo: "bwp12"}, {Name: "bwp12", Type: "ifb", Qdiscs: tbf}}, "CNI bandwidth plugin"},
		{"plugin on a cilium veth", []LinkTC{{Name: "lxc12", Qdiscs: []Qdisc{{Kind: "ingress"}}}, {Name: "bwp12", Qdiscs: tbf}}, "CNI bandwidth plugin"},
		{"unknown", []LinkTC{{Name: "veth12", Qdiscs: tbf}}, "CNI"},
	} {
		if got := shaperOf(tc.links); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
