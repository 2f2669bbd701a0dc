package labrun

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/qos"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
)

// fakeLinks resolves every member but "nobody" to a link named after it.
type fakeLinks struct{}

func (fakeLinks) Link(role, member string) (string, string, error) {
	if member == "nobody" {
		return "", "", errors.New("lab x has no node \"nobody\"")
	}
	return "cnl-x-" + member, role + "-dev", nil
}

// TestEnvCheck: before anything is changed, the lab refuses a change on a
// member it does not have, a set-up the kernel would not take, and a
// bottleneck above the rate the lab gave the node's uplink.
func TestEnvCheck(t *testing.T) {
	e := NewEnv(fakeLinks{})
	e.show = func(t qos.Target) (qos.State, error) {
		return qos.State{Link: t.Link, Qdiscs: []qos.QdiscInfo{{Kind: "tbf", Handle: "1:0", Parent: "root", RateBps: 500e6}}}, nil
	}
	bottleneck := func(rate uint64) *qosspec.Spec { return &qosspec.Spec{Setup: qosspec.SpecBottleneck, RateBps: rate} }
	for _, c := range []struct {
		name string
		c    suite.Change
		want string
	}{
		{"fits", suite.Change{What: suite.CapNodeQdisc, Member: "n2", QoS: bottleneck(100e6)}, ""},
		{"above the link", suite.Change{What: suite.CapNodeQdisc, Member: "n2", QoS: bottleneck(1e9)}, "1 Gbit/s is above the link's rate 500 Mbit/s"},
		{"no such member", suite.Change{What: suite.CapPodQdisc, Member: "nobody", QoS: &qosspec.Spec{Setup: qosspec.SpecPfifoFast}}, `no node "nobody"`},
		{"kernel refuses", suite.Change{What: suite.CapPolice, Member: "n2-p1", QoS: &qosspec.Spec{Setup: qosspec.SpecPolice, RateBps: 2000, BurstBytes: 1500}}, "below 8 kbit/s"},
		{"tos inherit", suite.Change{What: suite.CapVXLANTOS, Member: "n1"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := e.Check(context.Background(), c.c)
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("err %v, want %q", err, c.want)
			}
		})
	}
}

// TestEnvCaps: the police action is there only where the kernel has it;
// else the reason is a finding (the policing suite's row), not a refusal.
func TestEnvCaps(t *testing.T) {
	for _, police := range []bool{true, false} {
		e := NewEnv(fakeLinks{})
		e.detect = func(context.Context, string, ...string) (qos.Features, error) {
			f := qos.Features{Kernel: "test"}
			for _, n := range []string{qos.FeatureIngress, qos.FeatureU32} {
				f.List = append(f.List, qos.Feature{Name: n, Present: true})
			}
			f.List = append(f.List, qos.Feature{Name: qos.FeaturePolice, Present: police, Err: "no such file or directory"})
			return f, nil
		}
		caps := e.Caps()
		if caps.Has(suite.CapPolice) != police || (!police && !strings.Contains(caps.Unsupported[suite.CapPolice], "police action")) {
			t.Errorf("police %v: caps %+v", police, caps)
		}
		if !caps.Has(suite.CapNodeQdisc) || !caps.Has(suite.CapPodShaping) || !caps.Has(suite.CapVXLANTOS) {
			t.Errorf("caps %+v", caps)
		}
	}
}

// fakeServiceLab is a lab that records the Services made and removed.
type fakeServiceLab struct {
	fakeLinks
	made, removed []string
}

func (f *fakeServiceLab) ServiceFor(pod string, port int) (lab.Service, error) {
	if pod == "nobody" {
		return lab.Service{}, errors.New(`lab x has no pod "nobody"`)
	}
	return lab.Service{Pod: pod, ClusterIP: netip.MustParseAddr("10.96.1.2"), PodIP: netip.MustParseAddr("10.244.1.2"), Port: port}, nil
}

func (f *fakeServiceLab) AddService(_ context.Context, pod string, port int) (lab.Service, error) {
	s, err := f.ServiceFor(pod, port)
	if err == nil {
		f.made = append(f.made, s.Addr())
	}
	return s, err
}

func (f *fakeServiceLab) RemoveService(_ context.Context, s lab.Service) error {
	f.removed = append(f.removed, s.Addr())
	return nil
}

// TestEnvService: the lab has Services where iptables is there (else the
// reason); a service change makes one, the phase's Service steps to its
// pod dial it (others are left alone), and the undo removes it.
func TestEnvService(t *testing.T) {
	if caps := NewEnv(fakeLinks{}).Caps(); caps.Has(suite.CapService) || caps.Why[suite.CapService] == "" {
		t.Errorf("links without Services: caps %+v, want a reason for %s", caps, suite.CapService)
	}
	f := &fakeServiceLab{}
	e := NewEnv(f)
	e.servicesOK = func() error { return errors.New("the lab's Services need iptables") }
	if caps := e.Caps(); caps.Has(suite.CapService) || !strings.Contains(caps.Why[suite.CapService], "iptables") {
		t.Errorf("without iptables: caps %+v", caps)
	}
	e = NewEnv(f)
	e.servicesOK = func() error { return nil }
	if !e.Caps().Has(suite.CapService) {
		t.Fatalf("caps %+v lack %s", e.Caps(), suite.CapService)
	}
	if err := e.Check(context.Background(), suite.Change{What: suite.CapService, Member: "nobody", Port: 5201}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("check of a missing pod: %v", err)
	}
	undo, err := e.Apply(context.Background(), suite.Change{What: suite.CapService, Member: "n1-p1", Port: 5201})
	if err != nil {
		t.Fatal(err)
	}
	dst := suite.Endpoint{Name: "n1-p1"}
	if got := e.Rewrite(suite.Step{Service: true, Dst: dst}); got.Via != "10.96.1.2:5201" {
		t.Errorf("service step via %q, want 10.96.1.2:5201", got.Via)
	}
	if got := e.Rewrite(suite.Step{Dst: dst}); got.Via != "" {
		t.Errorf("plain step via %q, want none", got.Via)
	}
	if err := undo(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.Rewrite(suite.Step{Service: true, Dst: dst}); got.Via != "" || len(f.made) != 1 || len(f.removed) != 1 {
		t.Errorf("after undo: via %q, made %v, removed %v", got.Via, f.made, f.removed)
	}
}

// TestEnvCapsSayThePath: the lab's Caps carry its pods' MTU and its
// backend's encapsulation, which suites read instead of the backend's
// name; a lab is its own network (not AsIs) and limits pods without
// annotations.
func TestEnvCapsSayThePath(t *testing.T) {
	for _, c := range []struct {
		backend   string
		mtu       int
		wantEncap string
	}{
		{lab.BackendHostGW, 1500, suite.EncapNone},
		{lab.BackendVXLAN, 1450, suite.EncapVXLAN},
		{lab.BackendVXLAN, 8950, suite.EncapVXLAN},
	} {
		l := &lab.Lab{Config: lab.Config{Backend: c.backend}, Pods: []lab.Pod{{Name: "n1-p1", MTU: c.mtu}}}
		e := NewEnv(l)
		e.detect = func(context.Context, string, ...string) (qos.Features, error) {
			return qos.Features{}, errors.New("not looked at")
		}
		caps := e.Caps()
		if caps.PathMTU != c.mtu || caps.Encap != c.wantEncap || caps.AsIs || caps.Has(suite.CapPodAnnotations) {
			t.Errorf("%s lab, pod MTU %d: caps %+v", c.backend, c.mtu, caps)
		}
	}
}

// TestZoneLabels: with zones, the lab's nodes carry the zone label in
// turn; without, no labels.
func TestZoneLabels(t *testing.T) {
	l := &lab.Lab{Nodes: []lab.Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}, {Name: "n4"}, {Name: "n5"}}}
	for _, tc := range []struct {
		zones int
		want  map[string]string // node → zone
	}{
		{0, nil},
		{2, map[string]string{"n1": "zone-a", "n2": "zone-b", "n3": "zone-a", "n4": "zone-b", "n5": "zone-a"}},
		{5, map[string]string{"n1": "zone-a", "n5": "zone-e"}},
	} {
		e := NewEnv(l)
		e.zones = tc.zones
		got, err := e.NodeLabels(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == nil && got != nil {
			t.Errorf("zones 0: labels %v, want none", got)
		}
		for node, zone := range tc.want {
			if z := got[node][pairplan.DefaultZoneLabel]; z != zone {
				t.Errorf("zones %d: %s in %q, want %q", tc.zones, node, z, zone)
			}
		}
	}
}
