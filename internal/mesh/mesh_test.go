package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
)

func agents(nodes, perNode int) []api.Agent {
	var as []api.Agent
	for n := 0; n < nodes; n++ {
		for p := 0; p < perNode; p++ {
			as = append(as, api.Agent{PodUID: fmt.Sprintf("uid-%d-%d", n, p), NodeName: fmt.Sprintf("node%d", n), Status: "free"})
		}
	}
	return as
}

// TestPeersCoverWithinWindow: for each plan, the pairs of any window of
// consecutive rounds (starting anywhere) include every ordered pair of
// online agents on different nodes; the sample plan gives an agent at
// most k peers a round; offline agents neither ping nor are pinged.
func TestPeersCoverWithinWindow(t *testing.T) {
	for _, tc := range []struct {
		plan             string
		nodes, perNode   int
		k, window, first int
	}{
		{"all", 5, 1, 0, 1, 0},
		{"sample", 10, 1, 3, 3, 0},
		{"sample", 10, 1, 3, 3, 7},
		{"sample", 7, 1, 2, 3, 1000},
		{"sample", 50, 1, 3, 17, 5},
		{"sample", 6, 2, 2, 6, 2},
		{"sample", 3, 1, 5, 1, 0},
	} {
		t.Run(fmt.Sprintf("%s/%dx%d/k%d/from%d", tc.plan, tc.nodes, tc.perNode, tc.k, tc.first), func(t *testing.T) {
			as := agents(tc.nodes+1, tc.perNode)
			off := as[len(as)-1].PodUID
			for i := len(as) - tc.perNode; i < len(as); i++ {
				as[i].Status = "offline"
			}
			o := mesh.Options{Plan: tc.plan, Peers: tc.k}
			seen := map[[2]string]bool{}
			for c := tc.first; c < tc.first+tc.window; c++ {
				peers, err := mesh.Peers(as, o, c)
				if err != nil {
					t.Fatal(err)
				}
				for src, ps := range peers {
					if tc.plan == "sample" && len(ps) > tc.k {
						t.Errorf("round %d: agent %s pings %d peers, want at most %d", c, src, len(ps), tc.k)
					}
					for _, p := range ps {
						if src == off || p.PodUID == off || p.Status == "offline" {
							t.Fatalf("round %d: an offline agent in %s → %s", c, src, p.PodUID)
						}
						seen[[2]string{src, p.PodUID}] = true
					}
				}
			}
			for _, a := range as {
				for _, b := range as {
					if a.Status != "offline" && b.Status != "offline" && a.NodeName != b.NodeName && !seen[[2]string{a.PodUID, b.PodUID}] {
						t.Errorf("%s → %s not pinged within %d rounds", a.PodUID, b.PodUID, tc.window)
					}
				}
			}
		})
	}
}

// TestPeersZones: each round pings every pair inside a zone and, across
// zones, only between the round's representatives, one a zone, which
// rotate so every agent represents its zone within the largest zone's
// size in rounds; an agent without the label is named.
func TestPeersZones(t *testing.T) {
	as := agents(7, 1)
	zoneOf := map[string]string{}
	for i := range as {
		z := []string{"a", "a", "a", "b", "b", "c", "c"}[i]
		as[i].NodeLabels = map[string]string{"rack": z}
		zoneOf[as[i].PodUID] = z
	}
	o := mesh.Options{Plan: "zones", ZoneLabel: "rack"}
	represented := map[string]bool{}
	for c := 0; c < 3; c++ {
		peers, err := mesh.Peers(as, o, c)
		if err != nil {
			t.Fatal(err)
		}
		reps := map[string]string{} // zone → its representative this round
		inside := 0
		for src, ps := range peers {
			for _, p := range ps {
				if zoneOf[src] == zoneOf[p.PodUID] {
					inside++
					continue
				}
				for _, a := range []string{src, p.PodUID} {
					if r, ok := reps[zoneOf[a]]; ok && r != a {
						t.Errorf("round %d: zone %s has two representatives, %s and %s", c, zoneOf[a], r, a)
					}
					reps[zoneOf[a]] = a
					represented[a] = true
				}
			}
		}
		if inside != 3*2+2*1+2*1 {
			t.Errorf("round %d: %d pairs inside zones, want 10", c, inside)
		}
		if len(reps) != 3 {
			t.Errorf("round %d: representatives %v, want one for each of 3 zones", c, reps)
		}
	}
	if len(represented) != len(as) {
		t.Errorf("%d of %d agents represented their zone within 3 rounds", len(represented), len(as))
	}
	as[4].NodeLabels = nil
	if _, err := mesh.Peers(as, o, 0); err == nil || !strings.Contains(err.Error(), "rack") || !strings.Contains(err.Error(), as[4].NodeName) {
		t.Errorf("an agent without the label: %v, want an error naming the label and its node", err)
	}
}

func TestPlanValidates(t *testing.T) {
	for _, o := range []mesh.Options{{Interval: time.Second}, {Peers: 1000}, {Count: -1}, {Probe: "tcp"}, {Plan: "ring"}} {
		if _, err := mesh.Plan(agents(2, 1), o, 0); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	steps, err := mesh.Plan(agents(3, 2), mesh.Options{Plan: "all"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 24 {
		t.Fatalf("%d steps, want 6 agents × 4 on other nodes", len(steps))
	}
	for _, st := range steps {
		if st.Spec.Kind != "ping" || st.Exclusive || st.Src.Node == st.Dst.Node || st.Connection != "pod-pod cross node" {
			t.Fatalf("step %+v: want a non-exclusive cross-node ping", st)
		}
	}
}

// TestPlanStamp: the stamp option targets each peer's responder port and
// leaves out peers without one.
func TestPlanStamp(t *testing.T) {
	as := agents(2, 2)
	for i := range as {
		if i != 3 {
			as[i].ResponderAddr = fmt.Sprintf("10.0.0.%d:5201", i+1)
		}
	}
	steps, err := mesh.Plan(as, mesh.Options{Plan: "all", Probe: "stamp", Count: 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 6 {
		t.Fatalf("%d steps, want 8 less the 2 toward the agent without a responder", len(steps))
	}
	for _, st := range steps {
		if st.Spec.Kind != "stamp" || st.Spec.Target != st.Dst.ResponderAddr || st.Spec.Count != 7 || st.Dst.ID == as[3].PodUID {
			t.Fatalf("step %+v: want a stamp test of 7 packets to the peer's responder", st)
		}
	}
}

// Against a real server: a round creates a mesh run; while it runs (no
// agent fetches here) the next round is skipped.
func TestSchedulerRounds(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: "u", AgentToken: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.CloseDashboard(); ts.Close(); _ = st.Close() })
	ac, _ := client.New(ts.URL, "a")
	for _, a := range agents(3, 1) {
		if _, err := ac.Heartbeat(ctx, api.Heartbeat{PodName: a.PodUID, PodUID: a.PodUID, PodIP: "127.0.0.1", NodeName: a.NodeName}); err != nil {
			t.Fatal(err)
		}
	}
	uc, _ := client.New(ts.URL, "u")
	s, err := mesh.New(uc, mesh.Options{Interval: 5 * time.Second, Peers: 2})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Round(ctx)
	if err != nil || id == "" {
		t.Fatalf("first round: %q, %v", id, err)
	}
	run, err := uc.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Suite != mesh.Suite || len(run.Tasks) != 6 || !run.AllowConcurrency {
		t.Errorf("mesh run: suite %q, %d tasks, concurrency %v; want mesh, 6, true", run.Suite, len(run.Tasks), run.AllowConcurrency)
	}
	// The run carries its steps: its report knows the nodes (heat map).
	p, outs, err := suite.OutcomesFromRun(run)
	if err != nil || p.Suite != mesh.Suite || len(outs) != 6 || outs[0].Step.Src.Node == "" {
		t.Errorf("mesh run params: %v, suite %q, %d outcomes", err, p.Suite, len(outs))
	}
	if _, err := s.Round(ctx); !errors.Is(err, mesh.ErrBusy) {
		t.Errorf("second round while the first runs: %v, want ErrBusy", err)
	}
}
