package cniqos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifiedFigure: a measured row's figure comes from its medians in
// a few words; a row not tried gives its reason's first clause, cut.
func TestVerifiedFigure(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels map[string]string
		median map[string]float64
		want   string
	}{
		{"packet rate", map[string]string{LabelClass: ClassPacketRate}, map[string]float64{"received_pps": 1004.4, "offered_pps": 20000}, "1004 of 20000 packets/s arrived"},
		{"connections", map[string]string{LabelClass: ClassConnections}, map[string]float64{"held": 10, "attempted": 20}, "10 of 20 connections open at once"},
		{"bandwidth", map[string]string{LabelClass: ClassBandwidth}, map[string]float64{"steady_state_bps": 95.7e6, "first_interval_bps": 811.6e6}, "95.7 Mbit/s steady, first 100 ms 812 Mbit/s"},
		{"dscp", map[string]string{LabelClass: ClassDSCP}, map[string]float64{"dscp_received.leaving": 34, "dscp_received.pod": 0}, "34 leaving the cluster, 0 pod to pod"},
		{"none", map[string]string{LabelClass: ClassNone, LabelWhy: "no QoS of its own; a chained CNI bandwidth plugin honours it"}, nil, "no QoS of its own"},
		{"not tried", map[string]string{LabelClass: ClassPriority, LabelVerdict: Untried, LabelWhy: "the nodes' kernel lacks fq: fq qdisc not supported by this kernel: Specified qdisc kind is unknown"}, nil,
			"the nodes' kernel lacks fq"},
		{"long reason", map[string]string{LabelClass: ClassBandwidth, LabelVerdict: NotMeasured, LabelWhy: "flow: the agent said the task was cancelled by the server after its deadline of twenty seconds passed"}, nil,
			"flow: the agent said the task was cancelled by the server after …"},
		{"not measured", map[string]string{LabelClass: ClassPacketRate, LabelWhy: "flow: timeout"}, map[string]float64{"limit_pps": 1000}, "flow: timeout"},
	} {
		if got := NewVerified("calico", "vxlan", c.labels, c.median).Figure; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestMergeVerified: a CNI and mode's rows replace its earlier ones;
// other CNIs' and modes' stay; CNIs and features keep the table's order,
// modes the order first recorded.
func TestMergeVerified(t *testing.T) {
	v := func(cni, mode, feature, verdict string) Verified {
		return Verified{CNI: cni, Mode: mode, Feature: feature, Verdict: verdict}
	}
	rec := []Verified{v("flannel", "vxlan", "none", None), v("calico", "vxlan", "dscp", Works), v("calico", "vxlan", "egressPacketRate", NoEffect),
		v("calico", "direct", "egressPacketRate", NoEffect)}
	rec = MergeVerified(rec, "calico", "vxlan", []Verified{v("calico", "vxlan", "dscp", Works), v("calico", "vxlan", "egressPacketRate", Works)})
	rec = MergeVerified(rec, "cilium", "native", []Verified{v("cilium", "native", "priority", Untried)})
	var got []string
	for _, r := range rec {
		got = append(got, r.CNI+" "+r.Mode+" "+r.Feature+" "+r.Verdict)
	}
	want := []string{"calico vxlan egressPacketRate works", "calico vxlan dscp works", "calico direct egressPacketRate no effect",
		"cilium native priority cannot be tried here", "flannel vxlan none none"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("merged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUpdateVerified: the record and the doc's table are written
// together; a doc without the markers is refused and nothing written.
func TestUpdateVerified(t *testing.T) {
	dir := t.TempDir()
	record, doc := filepath.Join(dir, "rec.json"), filepath.Join(dir, "doc.md")
	os.WriteFile(doc, []byte("# x\n\n"+TableBegin+"\nold\n"+TableEnd+"\n\nafter\n"), 0o644)
	rows := []Verified{NewVerified("calico", "vxlan", map[string]string{LabelFeature: "egressPacketRate", LabelClass: ClassPacketRate, LabelVerdict: Works},
		map[string]float64{"received_pps": 1003, "offered_pps": 20000})}
	if err := UpdateVerified(record, doc, "calico", "vxlan", rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	want := "# x\n\n" + TableBegin + "\n" + VerifiedTable(rows) + TableEnd + "\n\nafter\n"
	if string(b) != want || !strings.Contains(string(b), "| calico vxlan | `egressPacketRate` | works | 1003 of 20000 packets/s arrived |") {
		t.Errorf("doc:\n%s\nwant:\n%s", b, want)
	}
	if rec, err := ReadVerified(record); err != nil || len(rec) != 1 || rec[0] != rows[0] {
		t.Errorf("record %+v, %v", rec, err)
	}
	os.WriteFile(doc, []byte("no markers\n"), 0o644)
	if err := UpdateVerified(record, doc, "calico", "direct", rows); err == nil || !strings.Contains(err.Error(), TableBegin) {
		t.Errorf("a doc without markers: %v", err)
	}
	if rec, _ := ReadVerified(record); len(rec) != 1 {
		t.Errorf("record written despite the refused doc: %+v", rec)
	}
}

// TestVerifiedTable: a CNI's modes of one feature follow each other;
// modes with the same verdict and figure share a line.
func TestVerifiedTable(t *testing.T) {
	v := func(mode, feature, verdict, figure string) Verified {
		return Verified{CNI: "calico", Mode: mode, Feature: feature, Verdict: verdict, Figure: figure}
	}
	got := VerifiedTable([]Verified{v("vxlan", "egressPacketRate", Works, "1003 of 20000 packets/s arrived"), v("vxlan", "dscp", Works, "34 leaving"),
		v("direct", "egressPacketRate", Works, "1004 of 20000 packets/s arrived"), v("direct", "dscp", Works, "34 leaving"),
		{CNI: "flannel", Mode: "vxlan", Feature: "none", Verdict: None, Figure: "a | b"}})
	want := "| CNI, mode | feature | verdict | figure or reason |\n|---|---|---|---|\n" +
		"| calico vxlan | `egressPacketRate` | works | 1003 of 20000 packets/s arrived |\n" +
		"| calico direct | `egressPacketRate` | works | 1004 of 20000 packets/s arrived |\n" +
		"| calico vxlan, direct | `dscp` | works | 34 leaving |\n" +
		"| flannel vxlan | `none` | none | a / b |\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}
