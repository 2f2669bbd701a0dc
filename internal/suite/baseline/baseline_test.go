package baseline

import (
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func TestBaselinePlan(t *testing.T) {
	o := Defaults()
	o.Repeat, o.Time, o.Backend = 2, time.Second, "vxlan"
	steps, err := Steps(suitetest.LabAgents(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2*3*4 {
		t.Fatalf("%d steps, want 24", len(steps))
	}
	first := steps[0]
	if first.Connection != suite.PodPodSameNode || first.Measure != suite.MeasureTCP || !first.Exclusive || first.Spec.Target != "10.244.1.2:5201" || first.Backend != "vxlan" {
		t.Errorf("first step = %+v", first)
	}
	for _, s := range steps {
		if s.Measure == suite.MeasurePing && (s.Spec.Target != s.Dst.IP || !s.Exclusive) {
			t.Errorf("ping step = %+v", s)
		}
		if s.Measure == suite.MeasureUDP && (s.Spec.RateBps == nil || *s.Spec.RateBps != o.UDPRateBps) {
			t.Errorf("udp step without its rate: %+v", s.Spec)
		}
	}
	for _, bad := range []Options{{Time: 0, Repeat: 1, UDPRateBps: 1, UDPSize: 100, PingCount: 1}, {Time: time.Second, Repeat: 0, UDPRateBps: 1, UDPSize: 100, PingCount: 1}} {
		if _, err := Steps(suitetest.LabAgents(), bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}
