package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestRegistrationBurst: many agents registering at once are all stored,
// each with its own ID, through batched writes.
func TestRegistrationBurst(t *testing.T) { storetest.ForEach(t, testRegistrationBurst) }

func testRegistrationBurst(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	const n = 300
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			r, err := f.agent.Heartbeat(context.Background(), api.Heartbeat{PodUID: fmt.Sprintf("burst-%03d", i), PodName: "p", PodIP: "10.1.0.1", NodeName: "n"})
			if err != nil {
				t.Errorf("heartbeat %d: %v", i, err)
				return
			}
			ids[i] = r.AgentID
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i, id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("agent %d got ID %d (seen before: %v)", i, id, seen[id])
		}
		seen[id] = true
	}
	as, err := f.st.ListAgents(context.Background(), store.AgentFilter{})
	if err != nil || len(as) != n {
		t.Errorf("%d agents stored (%v), want %d", len(as), err, n)
	}
}

// TestStoredHeartbeatsStayFresh: a beating agent's stored time never lags
// by more than a few seconds, whatever other agents do (one that beat once
// and went silent must not drag the others' times back), so the reaper
// only takes the silent one offline.
func TestStoredHeartbeatsStayFresh(t *testing.T) { storetest.ForEach(t, testStoredHeartbeatsStayFresh) }

func testStoredHeartbeatsStayFresh(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	f.beat("uid-live", "pod-live", "10.244.1.1", "n1")
	f.beat("uid-quiet", "pod-quiet", "10.244.1.2", "n1")
	for sec := 1; sec <= 16; sec++ {
		f.clock.Add(time.Second)
		f.beat("uid-live", "pod-live", "10.244.1.1", "n1")
		if sec == 1 {
			f.beat("uid-quiet", "pod-quiet", "10.244.1.2", "n1")
		}
		if err := f.srv.flushBeats(ctx); err != nil {
			t.Fatal(err)
		}
		if sec%3 != 0 {
			continue
		}
		res, err := f.srv.Reap(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Offline {
			if a.PodUID == "uid-live" {
				t.Fatalf("at %d s the beating agent was marked offline", sec)
			}
		}
		live, _ := f.st.GetAgent(ctx, "uid-live")
		if lag := f.clock.Now().Sub(live.LastHeartbeat); lag > 4*time.Second {
			t.Errorf("at %d s the stored heartbeat lags by %v", sec, lag)
		}
		quiet, _ := f.st.GetAgent(ctx, "uid-quiet")
		if wantOff := sec >= 12; (quiet.Status == store.AgentOffline) != wantOff {
			t.Errorf("at %d s the silent agent is %s", sec, quiet.Status)
		}
	}
	clients, err := f.user.Clients(ctx, false)
	if err != nil || len(clients) != 1 || !clients[0].UpdateTime.Equal(f.clock.Now()) {
		t.Errorf("clients list: %+v %v (want the live agent with its latest beat)", clients, err)
	}
}

// TestAgentRestartFailsLostTasks: an agent that comes back with a new boot
// ID lost what it held; those tasks fail at once with the reason, not at
// their deadline. Tasks it reports running are kept.
func TestAgentRestartFailsLostTasks(t *testing.T) {
	storetest.ForEach(t, testAgentRestartFailsLostTasks)
}

func testAgentRestartFailsLostTasks(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	ctx := context.Background()
	hb := func(boot string, running ...string) {
		t.Helper()
		_, err := f.agent.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1",
			ResponderAddr: "10.244.1.12:5201", BootID: boot, Running: running})
		if err != nil {
			t.Fatal(err)
		}
	}
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	hb("boot-1")
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1"), pingTask("-c 2")})
	if err != nil {
		t.Fatal(err)
	}
	if fr, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil || len(fr.Tasks) != 2 {
		t.Fatalf("fetch: %+v %v", fr, err)
	}
	if err := f.agent.Start(ctx, ids[0], "uid-a"); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Second)
	hb("boot-1", ids[0], ids[1]) // the same process: nothing happens
	f.clock.Add(2 * time.Second)
	hb("boot-2", ids[1]) // restarted; claims to hold the second (taken at its first fetch)
	for i, want := range []string{api.StateFailed, api.StateDispatched} {
		task, err := f.user.GetTask(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if task.State != want {
			t.Errorf("task %d: %s %q, want %s", i, task.State, task.Reason, want)
		}
		if want == api.StateFailed && task.Reason != ReasonAgentRestarted {
			t.Errorf("task %d reason %q", i, task.Reason)
		}
	}
	// A heartbeat without a boot ID (a seed client) never counts as a
	// restart.
	hb("", ids[1])
	if task, _ := f.user.GetTask(ctx, ids[1]); task.State != api.StateDispatched {
		t.Errorf("after a heartbeat without boot ID: %s", task.State)
	}
}
