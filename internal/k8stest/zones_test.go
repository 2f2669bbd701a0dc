package k8stest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/agent"
	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/k8s"
)

// agentZones checks that the installs' agents report their node's zone
// and region with no access to Nodes: the harness labels each node with
// a zone of its own, the API server copies the labels onto the pods it
// binds (PodTopologyLabelsAdmission), and the server lists every agent of
// every node, pod and host-network alike, with that node's labels.
func agentZones(ctx context.Context, t *testing.T, cl *Cluster, kc *k8s.Client) {
	fw, tok, hc := serverAPI(ctx, t, kc)
	defer fw.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fw.URL+"/api/v2/agents", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var online []api.Agent
	if err := json.NewDecoder(resp.Body).Decode(&online); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v2/agents: %d %v", resp.StatusCode, err)
	}
	seen := map[string]int{}
	for _, a := range online {
		for _, n := range cl.Nodes {
			if n.Name != a.NodeName {
				continue
			}
			seen[n.Name]++
			if a.NodeLabels[agent.LabelZone] != n.Zone || a.NodeLabels[agent.LabelRegion] != harnessRegion {
				t.Errorf("agent %s on %s reports node labels %v, want zone %s, region %s", a.PodName, n.Name, a.NodeLabels, n.Zone, harnessRegion)
			}
		}
	}
	for _, n := range cl.Nodes {
		if seen[n.Name] == 0 {
			t.Errorf("no agent of node %s online at the server (%d agents)", n.Name, len(online))
		}
	}
	t.Logf("%d agents online report their node's zone and region (%v)", len(online), seen)
}
