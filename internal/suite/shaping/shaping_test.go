package shaping

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/report/reporttest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestGoodput(t *testing.T) {
	// UDP: 1400 bytes of payload in 1442-byte frames; TCP: 1448-byte
	// segments (timestamps) in 1514-byte frames.
	if got := GoodputBps(10e6, "udp", 1400, 1500); math.Abs(got-10e6*1400/1442) > 1 {
		t.Errorf("udp goodput %v", got)
	}
	if got := GoodputBps(10e6, "tcp", 0, 1500); math.Abs(got-10e6*1448/1514) > 1 {
		t.Errorf("tcp goodput %v", got)
	}
}

func TestAnalyzeSeries(t *testing.T) {
	step := 100 * time.Millisecond
	for _, c := range []struct {
		name       string
		ser        []float64
		expected   float64
		conform    float64 // -1: never
		steady     float64
		firstRatio float64
	}{
		{"conforms at once", []float64{9.7, 9.7, 9.6, 9.8, 9.7, 9.7}, 9.7, 0, 9.7, 1},
		{"a receiver stall does not move the median", []float64{9.7, 9.7, 9.7, 9.7, 0, 19.4, 9.7, 9.6}, 9.7, 0, 9.65, 1},
		{"big burst first", []float64{75, 40, 9.7, 9.7, 9.7, 9.7, 9.7, 9.7}, 9.7, 0.2, 9.7, 75 / 9.7},
		{"never conforms", []float64{20, 20, 20, 20}, 9.7, -1, 20, 20 / 9.7},
		{"receiver jitter of one interval still conforms", []float64{8.61, 12.43, 8.74, 7.62, 10.53, 8.85, 9.74, 9.63, 4.93, 11.65, 9.7, 9.7}, 9.71, 0,
			(9.7 + 9.7) / 2, 8.61 / 9.71},
		{"late burst moves the steady window", []float64{9.7, 9.7, 9.7, 9.7, 9.7, 30, 9.7, 9.7, 9.7, 9.7}, 9.7, 0.6, 9.7, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := AnalyzeSeries(c.ser, step, c.expected)
			if c.conform < 0 {
				if a.ConformS != nil {
					t.Errorf("conform %v, want never", *a.ConformS)
				}
			} else if a.ConformS == nil || math.Abs(*a.ConformS-c.conform) > 1e-9 {
				t.Errorf("conform %v, want %v", a.ConformS, c.conform)
			}
			if math.Abs(a.SteadyBps-c.steady) > 1e-9 {
				t.Errorf("steady %v, want %v", a.SteadyBps, c.steady)
			}
			if math.Abs(a.FirstBps/c.expected-c.firstRatio) > 1e-9 {
				t.Errorf("first %v", a.FirstBps)
			}
		})
	}
}

func TestSeriesBpsDropsShortTail(t *testing.T) {
	ivs := []probe.Interval{{StartS: 0, EndS: 0.1, ThroughputBps: 1e6}, {StartS: 0.1, EndS: 0.2, Bytes: 25000}, {StartS: 0.2, EndS: 0.21, ThroughputBps: 9e9}}
	got := SeriesBps(ivs, 100*time.Millisecond, 0)
	if len(got) != 2 || got[0] != 1e6 || math.Abs(got[1]-2e6) > 1e-6 {
		t.Errorf("series %v", got)
	}
	// The drain after a 200 ms flow is not the flow's.
	ivs = []probe.Interval{{StartS: 0, EndS: 0.1, ThroughputBps: 1e6}, {StartS: 0.1, EndS: 0.2, ThroughputBps: 1e6}, {StartS: 0.2, EndS: 0.3, ThroughputBps: 4e5}}
	if got := SeriesBps(ivs, 100*time.Millisecond, 200*time.Millisecond); len(got) != 2 {
		t.Errorf("series with the drain %v", got)
	}
}

// TestShapingPlanAndRows: both placements by default, a phase per
// placement and burst; rows per placement, each with its placement's
// verdict (held where the receiver got the goodput, not held where it got
// 30 % more).
func TestShapingPlanAndRows(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Backend: "host-gw",
		Set: map[string]string{"egress-bandwidth": "10M", "ingress-bandwidth": "20M", "burst": "32Ki,4Mi"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suitetest.LabCaps())
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 4 {
		t.Fatalf("%d phases, want one per placement and burst", len(phases))
	}
	if len(phases[0].Steps) != 2*2*3 || phases[0].Concurrent {
		t.Fatalf("phase %q: %d steps", phases[0].Name, len(phases[0].Steps))
	}
	if ch := phases[1].Changes; len(ch) != 1 || ch[0].What != suite.CapPodShaping || ch[0].Member != phases[1].Steps[0].Src.Name ||
		!reflect.DeepEqual(*ch[0].QoS, qosspec.Spec{Setup: qosspec.SpecBandwidth, EgressRateBps: 10e6, EgressBurstBytes: 4 << 20, IngressRateBps: 20e6, IngressBurstBytes: 4 << 20}) {
		t.Fatalf("changes of the second phase: %+v", ch)
	}
	var outs []suite.Outcome
	for _, ph := range []suite.Phase{phases[0], phases[2]} { // the 32Ki phases of both placements
		shaped := ph.Changes[0].Member
		placement := ph.Steps[0].Labels[LabelPlacement]
		for _, st := range ph.Steps {
			dir := st.Labels[LabelDirection]
			if (dir == DirEgress) != (st.Src.Name == shaped) || (dir == DirIngress) != (st.Dst.Name == shaped) {
				t.Errorf("%s step from %s to %s", dir, st.Src.Name, st.Dst.Name)
			}
			if (placement == suite.PlacementSameNode) != (st.Src.Node == st.Dst.Node) || st.Labels[LabelPlacement] != placement {
				t.Errorf("%s step from %s to %s", placement, st.Src.Node, st.Dst.Node)
			}
			if !st.Exclusive || st.Spec.Interval.D() != 100*time.Millisecond {
				t.Errorf("step %+v", st)
			}
			// The receiver sees twice the limit for 200 ms, then the
			// goodput (same node) or 30 % more (cross node).
			limit := 10e6
			if dir == DirIngress {
				limit = 20e6
			}
			good := GoodputBps(uint64(limit), st.Labels[LabelProto], st.Spec.Size, 1500)
			want := math.Min(good, float64(*st.Spec.RateBps))
			got := want
			if placement == suite.PlacementCrossNode {
				got = 1.3 * want
			}
			var ivs []probe.Interval
			for i := 0; i < 20; i++ {
				v := got
				if i < 2 {
					v = 2 * want
				}
				ivs = append(ivs, probe.Interval{StartS: float64(i) / 10, EndS: float64(i+1) / 10, ThroughputBps: v})
			}
			outs = append(outs, suite.Outcome{Step: st, Result: &probe.Result{Intervals: ivs, LossPct: probe.Float(0)}})
		}
	}
	rows := Suite{}.Rows(outs)
	if len(rows) != 24 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		verdict := r.Labels[LabelVerdict]
		if r.Labels[LabelPlacement] == suite.PlacementCrossNode {
			if !strings.HasPrefix(verdict, "limit not held: 12 of 12 flows") || !strings.Contains(verdict, "+30.0 %") {
				t.Errorf("cross node %v: verdict %q", r.Labels, verdict)
			}
			continue
		}
		if !strings.HasPrefix(verdict, "limit held: every flow") || !strings.Contains(verdict, "conformed within 0.2 s") {
			t.Errorf("same node %v: verdict %q", r.Labels, verdict)
		}
		if e := r.Median["steady_state_error_pct"]; math.Abs(e) > 1e-9 {
			t.Errorf("%v: steady error %v", r.Labels, e)
		}
		if r.Median["time_to_conform_s"] != 0.2 || math.Abs(r.Median["overshoot_pct"]-100) > 1e-9 {
			t.Errorf("%v: conform %v overshoot %v", r.Labels, r.Median["time_to_conform_s"], r.Median["overshoot_pct"])
		}
		// What came above the expected rate before conforming: two
		// intervals of 100 ms at twice it.
		if want := 2 * r.Median["expected_bps"] * 0.1 / 8; math.Abs(r.Median["excess_bytes"]-want) > 1e-6*want {
			t.Errorf("%v: excess %v bytes, want %v", r.Labels, r.Median["excess_bytes"], want)
		}
		if len(r.Series["intervals_bps"]) != 20 {
			t.Errorf("series of %d", len(r.Series["intervals_bps"]))
		}
	}
	b, _ := json.Marshal(rows[0])
	for _, k := range []string{`"limit_bps":10000000`, `"steady_state_bps"`, `"first_interval_bps"`, `"time_to_conform_s"`, `"overshoot_pct"`, `"intervals_bps":[`,
		`"direction":"egress"`, `"burst":"32Ki"`, `"placement":"same-node"`, `"verdict":"limit held`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("row JSON lacks %s: %s", k, b)
		}
	}
	txt := reporttest.Text(t, Suite{}, rows)
	for _, want := range []string{"intervals_bps per 100ms, first 1s (Mbit/s)", "placement same-node, direction egress, proto udp, load at, burst 32Ki: ",
		"same-node (pod n1-p2 egress): limit held", "cross-node (pod n2-p1 ingress): limit not held", "placement  | direction"} {
		if !strings.Contains(txt, want) {
			t.Errorf("table lacks %q:\n%s", want, txt)
		}
	}
	// A placement the agents cannot give, asked for, is refused.
	one := suitetest.LabAgents()[2:] // one pod on node2, the host agents
	if _, err := (Suite{}).Plan(one, suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"placement": "same-node"}}, suitetest.LabCaps()); err == nil ||
		!strings.Contains(err.Error(), "needs two pods on one node") {
		t.Errorf("same-node without two pods on a node: %v", err)
	}
}

func TestShapingBadInput(t *testing.T) {
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"egress-bandwidth": "0"}, "rate 0"},
		{map[string]string{"egress-bandwidth": "10X"}, `optional k, M, G suffix`},
		{map[string]string{"egress-bandwidth": "1M", "burst": "100Mi"}, "over 4 s of tokens"},
		{map[string]string{"protos": "sctp"}, `protocol "sctp"`},
		{map[string]string{"loads": "way-above"}, `load "way-above"`},
		{map[string]string{"burst": "1k"}, "full-size packet"},
		{map[string]string{"drain": "maybe"}, `drain "maybe"`},
		{map[string]string{"annotations": "cilium"}, "want kubernetes or calico"},
		{map[string]string{"drain": "false"}, `only where pods are limited through annotations`},
		{map[string]string{"annotations": "calico"}, `only where pods are limited through annotations`},
	} {
		_, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: 2 * time.Second, Repeat: 1, Set: c.set}, suitetest.LabCaps())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.set, err, c.want)
		}
	}
	// Kubernetes: the CNI chooses the burst.
	k8s := suite.Caps{Have: []suite.Cap{suite.CapPodShaping}, Why: map[suite.Cap]string{suite.CapPodBurst: "the CNI bandwidth plugin chooses the burst"}}
	if _, err := (Suite{}).Plan(suitetest.LabAgents(), suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"burst": "32Ki"}}, k8s); err == nil || !strings.Contains(err.Error(), "the CNI bandwidth plugin chooses the burst") {
		t.Errorf("burst where the CNI chooses it: %v", err)
	}
}

// TestSLOOnShapingRows: an SLO file may name the shaping figures, and is
// evaluated on the suite's rows.
func TestSLOOnShapingRows(t *testing.T) {
	objs, err := suite.ParseSLOs([]byte(`{"apiVersion": "cnperf/v1", "objectives": [{"expr": "steady_state_error_pct < 5"}, {"expr": "time_to_conform_s <= 0.5"}]}`), suite.NewRegistry(Suite{}))
	if err != nil {
		t.Fatal(err)
	}
	row := suite.Row{Connection: "pod n2-p1 egress", Median: map[string]float64{"steady_state_error_pct": 1.2, "time_to_conform_s": 0.7}}
	checks := suite.Evaluate(objs, []suite.Row{row})
	if len(checks) != 2 || !checks[0].Pass || checks[1].Pass {
		t.Errorf("checks %+v", checks)
	}
	if _, err := suite.ParseSLOs([]byte(`{"apiVersion": "cnperf/v1", "objectives": [{"expr": "steady_state_bogus < 5"}]}`), suite.NewRegistry(Suite{})); err == nil || !strings.Contains(err.Error(), `unknown metric "steady_state_bogus"`) {
		t.Errorf("unknown metric: %v", err)
	}
}

// TestRowsCarryTheAppliedBurst: where the environment chose the burst
// (the CNI on Kubernetes), the rows say so and carry its figure.
func TestRowsCarryTheAppliedBurst(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{"egress-bandwidth": "10M", "protos": "tcp", "loads": "above"}}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), o, suite.Caps{Have: []suite.Cap{suite.CapPodShaping}})
	if err != nil {
		t.Fatal(err)
	}
	st := phases[0].Steps[0]
	st.Applied = &suite.Applied{By: "CNI", QoS: &qosspec.Spec{Setup: qosspec.SpecBandwidth, EgressRateBps: 10e6, EgressBurstBytes: 536870911}}
	ivs := []probe.Interval{{StartS: 0, EndS: 0.1, ThroughputBps: 9e6}, {StartS: 0.1, EndS: 0.2, ThroughputBps: 9e6}}
	rows := Suite{}.Rows([]suite.Outcome{{Step: st, Result: &probe.Result{Intervals: ivs}}})
	if len(rows) != 1 || rows[0].Labels[LabelBurst] != "537MB (CNI)" || rows[0].Median["burst_bytes"] != 536870911 {
		t.Errorf("rows %+v", rows)
	}
}

// TestShapingAsMadeWithCalicoAnnotations: drain=false and
// annotations=calico reach the environment's change (a fresh pod's bucket
// as the CNI makes it, asked for with Calico's own annotations); by
// default the bucket is drained and the kubernetes.io annotations ask.
func TestShapingAsMadeWithCalicoAnnotations(t *testing.T) {
	k8s := suite.Caps{Have: []suite.Cap{suite.CapPodShaping, suite.CapPodAnnotations}}
	for _, tc := range []struct {
		set       map[string]string
		asMade    bool
		annotated string
	}{
		{map[string]string{}, false, ""},
		{map[string]string{"drain": "false", "annotations": "calico"}, true, suite.AnnotationsCalico},
		{map[string]string{"drain": "true", "annotations": "kubernetes"}, false, suite.AnnotationsKubernetes},
	} {
		phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: 2 * time.Second, Repeat: 1, Set: tc.set}, k8s)
		if err != nil {
			t.Fatalf("%v: %v", tc.set, err)
		}
		for _, ph := range phases {
			if len(ph.Changes) != 1 || ph.Changes[0].AsMade != tc.asMade || ph.Changes[0].Annotations != tc.annotated {
				t.Errorf("%v: changes %+v, want as made %v, annotations %q", tc.set, ph.Changes, tc.asMade, tc.annotated)
			}
		}
	}
}

// TestShapingTakesTheMTUOfThePath: the segment size the expected rate is
// computed with is the pods' MTU as the environment says it, whatever
// the backend is called.
func TestShapingTakesTheMTUOfThePath(t *testing.T) {
	o := suite.Options{Time: 2 * time.Second, Repeat: 1, Backend: "any-name", Set: map[string]string{"protos": "tcp", "loads": "above"}}
	for _, c := range []struct {
		caps suite.Caps
		want string
	}{
		{suitetest.LabCaps(), "1500"},
		{suitetest.VXLANLabCaps(), "1450"},
		{suite.Caps{PathMTU: 9000, Have: []suite.Cap{suite.CapPodShaping, suite.CapPodBurst}}, "9000"},
	} {
		phases, err := Suite{}.Plan(suitetest.LabAgents(), o, c.caps)
		if err != nil {
			t.Fatal(err)
		}
		if got := phases[0].Steps[0].Labels[labelMTU]; got != c.want {
			t.Errorf("caps %+v: mtu %q, want %s", c.caps, got, c.want)
		}
	}
}

// TestShapingRatesReadAsEveryRate: egress-bandwidth and ingress-bandwidth
// take the rate grammar of every suite setting ("10m" is 10 Mbit/s, as
// for qos-priority's bottleneck-rate), and the Kubernetes quantities runs
// were stored with still read.
func TestShapingRatesReadAsEveryRate(t *testing.T) {
	for _, c := range []struct {
		v    string
		want uint64
	}{
		{"10m", 10e6}, {"10M", 10e6}, {"10000K", 10e6}, {"1.5G", 1.5e9}, {"10Mi", 10 << 20}, {"1e7", 10e6},
	} {
		for _, k := range []string{"egress-bandwidth", "ingress-bandwidth"} {
			so, err := OptionsFrom(suite.Options{Time: 2 * time.Second, Repeat: 1, Set: map[string]string{k: c.v}})
			got := so.EgressBps
			if k == "ingress-bandwidth" {
				got = so.IngressBps
			}
			if err != nil || got != c.want {
				t.Errorf("%s=%s: %d, %v; want %d", k, c.v, got, err, c.want)
			}
		}
	}
}
