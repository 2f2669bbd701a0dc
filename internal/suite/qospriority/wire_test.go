package qospriority

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

// TestWireVerdicts: the watch's DSCPs on the sending node's wire name
// where the mark was: lost at encapsulation, on the wire but not honoured,
// lost before the wire; with no watch the verdict is as before.
func TestWireVerdicts(t *testing.T) {
	row := func(variant string, p99 float64, wire map[string]float64) []suite.Row {
		unmarked := suite.Row{Labels: map[string]string{LabelVariant: variant, LabelMarking: "none"},
			Median: map[string]float64{"tos": 0, "dscp": 0, "latency_ms.p99": 12}}
		marked := suite.Row{Labels: map[string]string{LabelVariant: variant, LabelMarking: "EF"},
			Median: map[string]float64{"tos": 184, "dscp": 46, "latency_ms.p99": p99, "reference_latency_ms.p99": 12}}
		for k, v := range wire {
			marked.Median[k] = v
		}
		return []suite.Row{unmarked, marked}
	}
	for _, c := range []struct {
		name, want string
		rows       []suite.Row
	}{
		{"vxlan, outer TOS 0", "no effect: mark lost at encapsulation (outer 0, inner 46; the remedy, tos inherit: --set variants=vxlan-inherit), so a queue on the underlay cannot see it (p99 unmarked 12.0 ms, EF 11.9 ms)",
			row(VariantVXLAN, 11.9, map[string]float64{"wire_dscp.outer": 0, "wire_dscp.inner": 46})},
		{"fifo, mark on the wire", "no effect: mark on the wire but no queue honoured it (outer 46; p99 unmarked 12.0 ms, EF 12.1 ms)",
			row(VariantFIFO, 12.1, map[string]float64{"wire_dscp.outer": 46})},
		{"plain path, mark rewritten", "no effect: mark lost before the wire (outer 0, sent 46), so a queue",
			row(VariantHTBPriority, 12.1, map[string]float64{"wire_dscp.outer": 0})},
		{"inherit, protected", "priority protected the marked flow (EF): p99 12.0 ms → 0.200 ms; mark on the wire (outer 46)",
			row(VariantVXLANInherit, 0.2, map[string]float64{"wire_dscp.outer": 46, "wire_dscp.inner": 46})},
		{"no watch", "no effect: the queue where packets wait ignores the mark", row(VariantFIFO, 12.1, nil)},
	} {
		v := Verdicts(c.rows)
		if len(v) != 1 || !strings.HasPrefix(v[0].Text, c.want) {
			t.Errorf("%s: verdict %+v, want it to start %q", c.name, v, c.want)
		}
	}
}

// TestWireRows: the watches' results land on the marked row, the sending
// node's under wire_dscp (with the encapsulation as text), the receiving
// node's under wire_dscp.arrival, and the JSON nests them.
func TestWireRows(t *testing.T) {
	labels := func(at string) map[string]string {
		l := map[string]string{LabelVariant: VariantVXLAN, LabelMarking: "EF", "tos": "184"}
		if at != "" {
			l[labelWireAt] = at
		}
		return l
	}
	lat := &probe.Summary{P99: 11.9}
	watch := func(at string, outer int) suite.Outcome {
		return suite.Outcome{Step: suite.Step{Measure: MeasureWire, Labels: labels(at)}, Result: &probe.Result{Kind: probe.KindWire,
			WireDSCP: &probe.WireDSCP{WireDirection: probe.WireDirection{Packets: 100, Encap: "vxlan", Outer: probe.Int(outer), Inner: probe.Int(46)}}}}
	}
	rows := Suite{}.Rows([]suite.Outcome{
		{Step: suite.Step{Measure: MeasureForeground, Labels: labels("")}, Result: &probe.Result{Kind: probe.KindUDP, LatencyMs: lat}},
		watch(wireAtSrc, 0), watch(wireAtDst, 0),
	})
	if len(rows) != 1 {
		t.Fatalf("%d rows, want the marked foreground's one", len(rows))
	}
	b, err := json.Marshal(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Wire struct {
			Outer, Inner, Packets *float64
			Encap                 string
			Arrival               struct{ Outer, Inner *float64 }
		} `json:"wire_dscp"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	w := got.Wire
	if w.Outer == nil || *w.Outer != 0 || w.Inner == nil || *w.Inner != 46 || w.Encap != "vxlan" || w.Packets == nil || *w.Packets != 100 ||
		w.Arrival.Outer == nil || *w.Arrival.Outer != 0 || w.Arrival.Inner == nil || *w.Arrival.Inner != 46 {
		t.Errorf("row JSON %s", b)
	}
	if strings.Contains(suite.PresentationOf(Suite{}).RowName(rows[0]), "wire") {
		t.Errorf("the row's name %q carries the wire figures", suite.PresentationOf(Suite{}).RowName(rows[0]))
	}
}

// TestWireVerdictOnAMetadataTunnel: where the path's tunnel is a
// metadata-mode device (Cilium's cilium_vxlan, as Caps reads it off the
// nodes), a mark lost at encapsulation names no tos inherit remedy but
// why none works and what the CNI has for it; the tunnel travels from
// Plan's caps through the steps' labels to the rows.
func TestWireVerdictOnAMetadataTunnel(t *testing.T) {
	caps := suitetest.VXLANLabCaps()
	caps.Encap, caps.AsIs, caps.CNI, caps.MetadataTunnels = suite.EncapVXLAN, true, suite.CNIInfo{Name: "cilium"}, []string{"cilium_vxlan"}
	phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1,
		Set: map[string]string{"variants": VariantAsIs, "placement": PlacementCrossNode, "markings": "none,EF"}}, caps)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []suite.Outcome
	for _, ph := range phases {
		for _, st := range ph.Steps {
			res := &probe.Result{Kind: st.Spec.Kind, LatencyMs: &probe.Summary{P99: 12}}
			if st.Spec.TOS != nil && st.Measure == MeasureForeground {
				res.LatencyMs = &probe.Summary{P99: 11.9}
			}
			if st.Measure == MeasureWire {
				res.WireDSCP = &probe.WireDSCP{WireDirection: probe.WireDirection{Packets: 100, Encap: "vxlan", Outer: probe.Int(0), Inner: probe.Int(46)}}
			}
			outcomes = append(outcomes, suite.Outcome{Step: st, Result: res})
		}
	}
	rows := Suite{}.Rows(outcomes)
	seen := false
	for _, r := range rows {
		if r.Labels[LabelMarking] != "EF" {
			continue
		}
		seen = true
		v := r.Labels[LabelVerdict]
		if strings.Contains(v, "variants=vxlan-inherit") || !strings.Contains(v, "cilium_vxlan is a metadata-mode VXLAN device") ||
			!strings.Contains(v, "no setting of Cilium carries it") {
			t.Errorf("verdict %q: want no tos inherit remedy, the metadata-mode device named and Cilium's lack of a setting", v)
		}
		if r.Texts[wireMDKey] != "cilium_vxlan" || r.Texts[wireCNIKey] != "cilium" {
			t.Errorf("row texts %v, want the tunnel named", r.Texts)
		}
	}
	if !seen {
		t.Fatalf("no EF row in %+v", rows)
	}
}
