package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

func testAgents(t *testing.T, st store.Store) {
	ctx := context.Background()
	a := beat(t, st, "ag-1", "n1", at(0))
	if a.ID == 0 || a.Status != store.AgentFree || !a.RegisterTime.Equal(at(0)) || !a.LastHeartbeat.Equal(at(0)) {
		t.Fatalf("registered agent %+v", a)
	}
	b := beat(t, st, "ag-1", "n1-renamed", at(1.5))
	if b.ID != a.ID || !b.RegisterTime.Equal(at(0)) || !b.LastHeartbeat.Equal(at(1.5)) || b.NodeName != "n1-renamed" {
		t.Errorf("second heartbeat: %+v (first %+v)", b, a)
	}
	batch, err := st.RegisterAgents(ctx, []store.Agent{{PodUID: "ag-2", PodName: "p2", NodeName: "n2"}, {PodUID: "ag-1", PodName: "pod-ag-1", NodeName: "n1", Status: store.AgentBusy}}, at(2))
	if err != nil || len(batch) != 2 || batch[1].ID != a.ID || batch[0].PodUID != "ag-2" || batch[0].ID == 0 || !batch[0].RegisterTime.Equal(at(2)) {
		t.Fatalf("batch heartbeat: %+v %v", batch, err)
	}
	got, err := st.GetAgent(ctx, "ag-1")
	if err != nil || got.Status != store.AgentBusy || !got.LastHeartbeat.Equal(at(2)) || got.ID != a.ID {
		t.Errorf("after batch: %+v %v", got, err)
	}
	if _, err := st.GetAgent(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown agent: %v", err)
	}
	if _, err := st.UpsertHeartbeat(ctx, store.Agent{PodUID: "ag-x", Status: store.AgentOffline}, at(2)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("heartbeat claiming offline: %v, want ErrInvalid", err)
	}
	if err := st.UpsertHeartbeats(ctx, []store.Agent{{PodUID: "ag-2", PodName: "p2", NodeName: "n2"}}, at(2)); err != nil {
		t.Fatal(err)
	}
	// Silent since before 10 s ago at t=12: ag-1 and ag-2 beat at 2 → not yet.
	off, err := st.MarkSilentOffline(ctx, at(12).Add(-10*time.Second), at(12))
	if err != nil || len(off) != 0 {
		t.Fatalf("offline at 12 s: %v %v", off, err)
	}
	beat(t, st, "ag-2", "n2", at(5))
	off, err = st.MarkSilentOffline(ctx, at(12.5).Add(-10*time.Second), at(12.5))
	if err != nil || len(off) != 1 || off[0].PodUID != "ag-1" || off[0].Status != store.AgentOffline {
		t.Fatalf("offline at 12.5 s: %+v %v", off, err)
	}
	online, _ := st.ListAgents(ctx, store.AgentFilter{})
	all, _ := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
	if !hasAgent(online, "ag-2") || hasAgent(online, "ag-1") || !hasAgent(all, "ag-1") {
		t.Errorf("online %v all %v", uids(online), uids(all))
	}
	byNode, _ := st.ListAgents(ctx, store.AgentFilter{IncludeOffline: true, Node: "n2"})
	if len(byNode) != 1 || byNode[0].PodUID != "ag-2" {
		t.Errorf("by node: %v", uids(byNode))
	}
	back := beat(t, st, "ag-1", "n1", at(13))
	if back.Status != store.AgentFree || back.ID != a.ID || !back.RegisterTime.Equal(at(0)) {
		t.Errorf("back online: %+v", back)
	}
	// TouchAgents: online agents get the time and status; offline and
	// unknown ones are left alone.
	beat(t, st, "ag-3", "n3", at(0))
	if off, _ := st.MarkSilentOffline(ctx, at(13).Add(-10*time.Second), at(13)); !hasAgent(off, "ag-3") {
		t.Fatalf("ag-3 not offline: %v", uids(off))
	}
	n, err := st.TouchAgents(ctx, []store.Touch{{PodUID: "ag-1", Status: store.AgentBusy, At: at(14)}, {PodUID: "ag-3", At: at(14)}, {PodUID: "nobody", At: at(14)}, {PodUID: "ag-2", At: at(13.5)}})
	if err != nil || n != 2 {
		t.Fatalf("touch: %d rows, %v; want 2", n, err)
	}
	if g, _ := st.GetAgent(ctx, "ag-2"); !g.LastHeartbeat.Equal(at(13.5)) {
		t.Errorf("touch with its own time: %v", g.LastHeartbeat)
	}
	if g, _ := st.GetAgent(ctx, "ag-1"); g.Status != store.AgentBusy || !g.LastHeartbeat.Equal(at(14)) {
		t.Errorf("touched agent: %+v", g)
	}
	if g, _ := st.GetAgent(ctx, "ag-3"); g.Status != store.AgentOffline || !g.LastHeartbeat.Equal(at(0)) {
		t.Errorf("offline agent revived by a touch: %+v", g)
	}
	if _, err := st.TouchAgents(ctx, []store.Touch{{PodUID: "ag-1", Status: store.AgentOffline, At: at(15)}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("touch to offline: %v, want ErrInvalid", err)
	}
	// An older time (a server replica the agent left) is not written.
	if n, err := st.TouchAgents(ctx, []store.Touch{{PodUID: "ag-1", At: at(12)}}); err != nil || n != 0 {
		t.Errorf("touch with an older time: %d rows, %v; want 0", n, err)
	}
	if g, _ := st.GetAgent(ctx, "ag-1"); !g.LastHeartbeat.Equal(at(14)) {
		t.Errorf("touch moved the heartbeat back to %v, want %v", g.LastHeartbeat, at(14))
	}
}

func hasAgent(as []store.Agent, uid string) bool {
	for _, a := range as {
		if a.PodUID == uid {
			return true
		}
	}
	return false
}

func uids(as []store.Agent) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.PodUID)
	}
	return out
}

// testRegisterBatch writes a registration batch larger than one statement
// (stores may split it) with one pod uid twice: every answer is its own
// agent's, in order, and the later heartbeat of the repeated uid wins.
func testRegisterBatch(t *testing.T, st store.Store) {
	ctx := context.Background()
	var in []store.Agent
	for i := range 450 {
		in = append(in, store.Agent{PodUID: fmt.Sprintf("rb-%03d", i), PodName: fmt.Sprintf("p-%d", i), NodeName: "n-first"})
	}
	in[300] = store.Agent{PodUID: "rb-007", PodName: "p-7", NodeName: "n-second", Status: store.AgentBusy}
	out, err := st.RegisterAgents(ctx, in, at(3))
	if err != nil || len(out) != len(in) {
		t.Fatalf("register %d agents: %d answers, %v", len(in), len(out), err)
	}
	for i := range in {
		if out[i].PodUID != in[i].PodUID || out[i].ID == 0 || out[i].PodName != in[i].PodName || !out[i].LastHeartbeat.Equal(at(3)) {
			t.Fatalf("answer %d: %+v for %+v", i, out[i], in[i])
		}
	}
	if out[7].ID != out[300].ID || out[7].NodeName != "n-first" || out[300].NodeName != "n-second" {
		t.Errorf("the repeated uid: first answer %+v, second %+v", out[7], out[300])
	}
	got, err := st.GetAgent(ctx, "rb-007")
	if err != nil || got.NodeName != "n-second" || got.Status != store.AgentBusy {
		t.Errorf("rb-007 stored as %+v %v, want the later heartbeat's node n-second and busy", got, err)
	}
}
