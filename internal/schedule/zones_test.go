package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// TestZonesFromAgentLabels: on the server (no environment to list Node
// objects, as a schedule runs), the zones plan groups nodes by the
// labels the agents reported in their heartbeats: the server stores and
// lists them, and the plan's cross-zone pairs are between one node a
// zone. An agent reporting none is named; too many labels are refused.
func TestZonesFromAgentLabels(t *testing.T) {
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
	uc, _ := client.New(ts.URL, "u")
	zoneOf := map[string]string{"n1": "z-a", "n2": "z-a", "n3": "z-b", "n4": "z-b"}
	beat := func(node string, labels map[string]string) error {
		_, err := ac.Heartbeat(ctx, api.Heartbeat{PodName: "p-" + node, PodUID: "uid-" + node, PodIP: "127.0.0.1", NodeName: node,
			ResponderAddr: "127.0.0.1:5201", NodeLabels: labels})
		return err
	}
	for node, z := range zoneOf {
		if err := beat(node, map[string]string{"topology.kubernetes.io/zone": z}); err != nil {
			t.Fatal(err)
		}
	}
	agents, err := uc.Agents(ctx, false)
	if err != nil || len(agents) != 4 {
		t.Fatalf("agents %+v, %v", agents, err)
	}
	for _, a := range agents {
		if got := a.NodeLabels["topology.kubernetes.io/zone"]; got != zoneOf[a.NodeName] {
			t.Errorf("agent on %s lists zone %q, want %q", a.NodeName, got, zoneOf[a.NodeName])
		}
	}
	r := &suite.Runner{API: uc}
	o := suite.Options{Time: 1e8, Repeat: 1, Set: map[string]string{"plan": "zones", "cycles": "1"}}
	_, phases, err := r.Plan(ctx, matrix.Suite{}, o)
	if err != nil {
		t.Fatalf("plan=zones on the server: %v", err)
	}
	across := map[[2]string]bool{}
	for _, ph := range phases {
		for _, s := range ph.Steps {
			if zoneOf[s.Src.Node] != zoneOf[s.Dst.Node] {
				across[[2]string{s.Src.Node, s.Dst.Node}] = true
			}
		}
	}
	if len(across) != 2 {
		t.Errorf("cross-zone pairs %v: want one representative a zone each way", across)
	}

	bad := map[string]string{}
	for i := range api.MaxNodeLabels + 1 {
		bad[fmt.Sprintf("k%d", i)] = "v"
	}
	if err := beat("n5", bad); api.StatusOf(err) != 400 || !strings.Contains(err.Error(), "node_labels") {
		t.Errorf("%d labels: %v, want a 400 naming node_labels", len(bad), err)
	}
	if err := beat("n5", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Plan(ctx, matrix.Suite{}, o); err == nil || !strings.Contains(err.Error(), "n5") {
		t.Errorf("an agent that reported no zone: %v, want an error naming its node", err)
	}
}
