package labrun

import (
	"context"
	"errors"
	"strings"
	"testing"

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
