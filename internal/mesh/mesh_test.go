package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
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

func TestPeersBoundedStableAndSpread(t *testing.T) {
	as := agents(50, 10) // 500 agents
	peers := mesh.Peers(as, 3)
	if len(peers) != 500 {
		t.Fatalf("%d agents with peers, want 500", len(peers))
	}
	asDst := map[string]int{}
	for src, ps := range peers {
		if len(ps) != 3 {
			t.Fatalf("agent %s has %d peers, want 3", src, len(ps))
		}
		for _, p := range ps {
			if p.NodeName == as[0].NodeName && src[:6] == "uid-0-" {
				t.Errorf("agent %s probes a peer on its own node", src)
			}
			asDst[p.PodUID]++
		}
	}
	// Rendezvous hashing spreads the probes: no agent is probed by many.
	most := 0
	for _, n := range asDst {
		most = max(most, n)
	}
	if most > 15 {
		t.Errorf("one agent is probed by %d others (3 on average)", most)
	}
	// An agent leaving changes only the choices that pointed at it.
	gone := as[250].PodUID
	after := mesh.Peers(append(append([]api.Agent(nil), as[:250]...), as[251:]...), 3)
	changed := 0
	for src, ps := range peers {
		if src == gone {
			continue
		}
		pointed := false
		for _, p := range ps {
			pointed = pointed || p.PodUID == gone
		}
		same := len(after[src]) == len(ps)
		for i := range ps {
			same = same && after[src][i].PodUID == ps[i].PodUID
		}
		if !same {
			changed++
			if !pointed {
				t.Errorf("agent %s changed peers though it did not probe the one that left", src)
			}
		}
	}
	if changed != asDst[gone] {
		t.Errorf("%d agents changed peers, want the %d that probed the one that left", changed, asDst[gone])
	}
	// Offline agents neither probe nor are probed.
	as[0].Status = "offline"
	for src, ps := range mesh.Peers(as, 3) {
		if src == as[0].PodUID {
			t.Error("an offline agent got peers")
		}
		for _, p := range ps {
			if p.PodUID == as[0].PodUID {
				t.Error("an offline agent is probed")
			}
		}
	}
}

func TestPlanValidates(t *testing.T) {
	for _, o := range []mesh.Options{{Interval: time.Second}, {Peers: 1000}, {Count: -1}, {Probe: "tcp"}} {
		if _, err := mesh.Plan(agents(2, 1), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	steps, err := mesh.Plan(agents(3, 2), mesh.Options{Peers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 12 {
		t.Fatalf("%d steps, want 6 agents × 2 peers", len(steps))
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
	steps, err := mesh.Plan(as, mesh.Options{Peers: 2, Probe: "stamp", Count: 7})
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
