package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/suite"
)

func endpoints() []suite.Endpoint {
	return []suite.Endpoint{
		{ID: "u-peer", Name: "cnperf-agent-a", Node: "n1", IP: "10.0.1.2", ResponderAddr: "10.0.1.2:5201"},
		{ID: "u-shaped", Name: "cnperf-shaped-x", Node: "n2", IP: "10.0.2.2", ResponderAddr: "10.0.2.2:5201"},
	}
}

func TestCNIShapingPlansWithoutTouchingTheNetwork(t *testing.T) {
	o := suite.Options{Time: time.Second, Repeat: 1, Set: map[string]string{"egress-bandwidth": "10M", "protos": "tcp", "loads": "above"}}
	phases, err := CNIShaping{}.Plan(endpoints(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 1 || len(phases[0].Steps) != 1 {
		t.Fatalf("phases %+v", phases)
	}
	if phases[0].Setup != nil || phases[0].Teardown != nil {
		t.Fatal("a phase would change qdiscs the CNI owns")
	}
	st := phases[0].Steps[0]
	if st.Src.ID != "u-shaped" || st.Dst.ID != "u-peer" {
		t.Fatalf("egress flow %s -> %s, want from the shaped pod", st.Src.Name, st.Dst.Name)
	}
}

func TestDrainSuite(t *testing.T) {
	o := suite.Options{Time: 3 * time.Second, Repeat: 1}
	for _, tc := range []struct {
		ingress  bool
		src, dst string
	}{{false, "u-shaped", "u-peer"}, {true, "u-peer", "u-shaped"}} {
		ph, err := DrainSuite{Shaped: "u-shaped", Peer: "u-peer", Ingress: tc.ingress}.Plan(endpoints(), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := ph[0].Steps[0]
		if s.Src.ID != tc.src || s.Dst.ID != tc.dst || s.Spec.RateBps != nil || s.Spec.Duration.D() != 3*time.Second {
			t.Errorf("ingress %v: step %+v", tc.ingress, s)
		}
	}
	if _, err := (DrainSuite{Shaped: "gone", Peer: "u-peer"}).Plan(endpoints(), o, nil); err == nil || !strings.Contains(err.Error(), "not among") {
		t.Fatalf("missing shaped pod: %v", err)
	}
}

type fakeAPI struct{ suite.API }

func (fakeAPI) Agents(context.Context, bool) ([]api.Agent, error) {
	return []api.Agent{{PodUID: "a"}, {PodUID: "b"}, {PodUID: "gone"}}, nil
}

func TestLiveAPI(t *testing.T) {
	l := LiveAPI{API: fakeAPI{}, Live: map[string]bool{"a": true, "b": true}}
	as, _ := l.Agents(context.Background(), false)
	if len(as) != 2 {
		t.Fatalf("agents %v: a deleted pod's agent must not be used", as)
	}
	l.Only = map[string]bool{"b": true}
	as, _ = l.Agents(context.Background(), false)
	if len(as) != 1 || as[0].PodUID != "b" {
		t.Fatalf("agents %v: want only b", as)
	}
}
