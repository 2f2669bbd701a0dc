package pmtu

import (
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

func TestJudge(t *testing.T) {
	ok := func(size int) sizeResult { return sizeResult{size: size, answered: true, sentWithoutRefusal: true} }
	lost := func(size int) sizeResult { return sizeResult{size: size, sentWithoutRefusal: true} }
	refused := func(size int) sizeResult { return sizeResult{size: size, refused: true} }
	learnt := func(size int) sizeResult { return sizeResult{size: size, refused: true, sentWithoutRefusal: true} }
	cases := []struct {
		name                    string
		in                      []sizeResult
		mtu, refusedFrom, black float64
		blackAt                 float64
	}{
		{"interface limit", []sizeResult{ok(1280), ok(1450), refused(1480), refused(1500)}, 1450, 1480, 0, 0},
		{"learnt from ICMP", []sizeResult{ok(1280), ok(1400), learnt(1450), refused(1500)}, 1400, 1450, 0, 0},
		{"black hole", []sizeResult{ok(1280), ok(1400), lost(1450), lost(1480), refused(1500)}, 1400, 1500, 1, 1450},
		{"all answered", []sizeResult{ok(1280), ok(9000)}, 9000, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Judge(c.in)
			if got[FigPathMTU] != c.mtu || got[FigRefusedFrom] != c.refusedFrom || got[FigBlackHole] != c.black || got[FigBlackHoleSize] != c.blackAt {
				t.Errorf("got %v", got)
			}
		})
	}
}

func TestPlanAndRows(t *testing.T) {
	agents := []suite.Endpoint{
		{ID: "p1", Name: "n1-p1", Node: "n1", IP: "10.244.1.2"}, {ID: "p2", Name: "n2-p1", Node: "n2", IP: "10.244.2.2"},
		{ID: "h1", Name: "n1", Node: "n1", IP: "10.170.0.1", HostNetwork: true}, {ID: "h2", Name: "n2", Node: "n2", IP: "10.170.0.2", HostNetwork: true},
	}
	o := suite.Options{Repeat: 1, Set: map[string]string{"sizes": "1400,1500"}}
	phases, err := Suite{}.Plan(agents, o, suite.Caps{PathMTU: 1450})
	if err != nil {
		t.Fatal(err)
	}
	var outs []suite.Outcome
	for _, st := range phases[0].Steps {
		if !st.Spec.DontFragment || st.Spec.Kind != probe.KindPing {
			t.Fatalf("step without DF ping: %+v", st.Spec)
		}
		got := int64(0)
		if st.Spec.Size+ipv4Header <= 1450 {
			got = 3
		}
		tooBig := int64(0)
		if got == 0 && st.Connection == suite.PodPodCrossNode {
			tooBig = 3
		}
		outs = append(outs, suite.Outcome{Step: st, Result: &probe.Result{Kind: probe.KindPing,
			Packets: &probe.PacketCounts{Sent: 3, Received: got, TooBig: tooBig}}})
	}
	if len(outs) != 4 { // two sizes on two paths (no two pods on one node)
		t.Fatalf("%d steps, want 4", len(outs))
	}
	rows := Suite{}.Rows(outs)
	want := map[string]float64{suite.PodPodCrossNode: 0, suite.NodeNode: 1}
	for _, r := range rows {
		if r.Median[FigPathMTU] != 1400 || r.Median[FigBlackHole] != want[r.Connection] || len(r.Labels) != 0 {
			t.Errorf("row %s: %v labels %v", r.Connection, r.Median, r.Labels)
		}
	}
	if len(rows) != 2 {
		t.Errorf("%d rows, want 2", len(rows))
	}
	if _, err := (Suite{}).Plan(agents, suite.Options{Set: map[string]string{"sizes": "12"}}, suite.Caps{}); err == nil || !strings.Contains(err.Error(), "IP packet size") {
		t.Errorf("bad size: %v", err)
	}
}
