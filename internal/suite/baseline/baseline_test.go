package baseline

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
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
	// Per repetition: 3 connections x 4 measurements, and pod-service's 3
	// (no ping).
	if len(steps) != 2*(3*4+3) {
		t.Fatalf("%d steps, want 30", len(steps))
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

// TestBaselineStampSetting: --set stamp=true adds one stamp step per
// connection and repetition, to the destination's responder, marked EF;
// without it the plan is unchanged; bad values are refused by name.
func TestBaselineStampSetting(t *testing.T) {
	cases := []struct {
		set       map[string]string
		wantStamp int
		wantErr   string
	}{
		{set: nil, wantStamp: 0},
		{set: map[string]string{"stamp": "false"}, wantStamp: 0},
		{set: map[string]string{"stamp": "true"}, wantStamp: 3},
		{set: map[string]string{"stamp": "true", "stamp-count": "20"}, wantStamp: 3},
		{set: map[string]string{"stamp": "maybe"}, wantErr: "stamp"},
		{set: map[string]string{"stamp": "true", "stamp-count": "0"}, wantErr: "stamp count"},
	}
	for _, c := range cases {
		phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 1, Set: c.set}, suite.Caps{})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("set %v: error %v, want one naming %q", c.set, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("set %v: %v", c.set, err)
		}
		n := 0
		for _, s := range phases[0].Steps {
			if s.Measure != suite.MeasureStamp {
				continue
			}
			n++
			wantCount := 100
			if c.set["stamp-count"] == "20" {
				wantCount = 20
			}
			if s.Spec.Kind != probe.KindStamp || s.Spec.Target != s.Dst.ResponderAddr || s.Spec.DSCP() != StampDSCP ||
				s.Spec.Count != wantCount || !s.Exclusive {
				t.Errorf("set %v: stamp step %+v", c.set, s)
			}
		}
		if n != c.wantStamp || len(phases[0].Steps) != 3*4+n {
			t.Errorf("set %v: %d stamp steps of %d, want %d of %d", c.set, n, len(phases[0].Steps), c.wantStamp, 12+c.wantStamp)
		}
	}
}

// TestBaselineServicePlan: pod-service is the cross-node pair through a
// Service in front of its destination (one CapService change on the
// destination pod, its responder's port), measured with TCP, UDP and rr
// (a ClusterIP answers no ping); left out where the environment has no
// Services unless service=true insists; service=false leaves it out.
func TestBaselineServicePlan(t *testing.T) {
	cases := []struct {
		name        string
		caps        suite.Caps
		set         map[string]string
		wantService bool
		wantErr     string
	}{
		{name: "lab", caps: suitetest.LabCaps(), wantService: true},
		{name: "no services", caps: suite.Caps{}, wantService: false},
		{name: "insisted", caps: suite.Caps{}, set: map[string]string{"service": "true"}, wantService: true},
		{name: "turned off", caps: suitetest.LabCaps(), set: map[string]string{"service": "false"}, wantService: false},
		{name: "bad value", caps: suitetest.LabCaps(), set: map[string]string{"service": "yes please"}, wantErr: "service"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			phases, err := Suite{}.Plan(suitetest.LabAgents(), suite.Options{Time: time.Second, Repeat: 2, Set: c.set}, c.caps)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, c.wantErr)
				}
				return
			}
			if err != nil || len(phases) != 1 {
				t.Fatalf("%d phases, %v", len(phases), err)
			}
			ph := phases[0]
			var cross suite.Step
			var svc []suite.Step
			for _, st := range ph.Steps {
				if st.Connection == suite.PodPodCrossNode {
					cross = st
				}
				if st.Connection == suite.PodService {
					svc = append(svc, st)
				}
			}
			if !c.wantService {
				if len(svc) != 0 || len(ph.Changes) != 0 {
					t.Fatalf("%d pod-service steps, changes %v; want none", len(svc), ph.Changes)
				}
				return
			}
			if len(svc) != 2*3 {
				t.Fatalf("%d pod-service steps, want 6 (tcp, udp, rr per repetition)", len(svc))
			}
			for _, st := range svc {
				if !st.Service || st.Measure == suite.MeasurePing || st.Src != cross.Src || st.Dst != cross.Dst || !st.Exclusive {
					t.Errorf("pod-service step %+v, want the cross-node pair marked Service, no ping", st)
				}
			}
			want := suite.Change{What: suite.CapService, Member: cross.Dst.Name, Port: 5201}
			if len(ph.Changes) != 1 || !reflect.DeepEqual(ph.Changes[0], want) {
				t.Errorf("changes %v, want [%v]", ph.Changes, want)
			}
		})
	}
}
