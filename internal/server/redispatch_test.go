package server

import (
	"context"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestReoffer: a task handed out and not acknowledged is re-offered by the
// first heartbeat ReofferAfter later (same id); a task the heartbeat lists
// as running or undelivered, or that the agent started, is not; a seed
// agent (no boot id) is left alone.
func TestReoffer(t *testing.T) { storetest.ForEach(t, testReoffer) }

func testReoffer(t *testing.T, dsn string) {
	cases := []struct {
		name        string
		running     []string // "task": the task's id
		undelivered []string
		started     bool
		bootID      string
		early       bool // the heartbeat comes before ReofferAfter
		want        bool
	}{
		{name: "lost answer", bootID: "b1", want: true},
		{name: "too early", bootID: "b1", early: true},
		{name: "listed running", bootID: "b1", running: []string{"task"}},
		{name: "listed undelivered", bootID: "b1", undelivered: []string{"task"}},
		{name: "started", bootID: "b1", started: true},
		{name: "seed agent", bootID: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, dsn, nil)
			ctx := context.Background()
			hb := api.Heartbeat{PodUID: "uid-a", PodName: "pod-a", PodIP: "10.244.1.12", NodeName: "node-1", BootID: c.bootID}
			if _, err := f.agent.Heartbeat(ctx, hb); err != nil {
				t.Fatal(err)
			}
			f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
			ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
			if err != nil {
				t.Fatal(err)
			}
			fr, err := f.agent.Fetch(ctx, "uid-a", 0) // this answer is "lost"
			if err != nil || len(fr.Tasks) != 1 {
				t.Fatalf("first fetch: %+v %v", fr, err)
			}
			if c.started {
				if err := f.agent.Start(ctx, ids[0], "uid-a"); err != nil {
					t.Fatal(err)
				}
			}
			sub := func(l []string) []string {
				var out []string
				for _, s := range l {
					if s == "task" {
						s = ids[0]
					}
					out = append(out, s)
				}
				return out
			}
			hb.Running, hb.Undelivered = sub(c.running), sub(c.undelivered)
			if c.early {
				f.clock.Add(DefaultReofferAfter / 2)
			} else {
				f.clock.Add(DefaultReofferAfter)
			}
			if _, err := f.agent.Heartbeat(ctx, hb); err != nil {
				t.Fatal(err)
			}
			fr, err = f.agent.Fetch(ctx, "uid-a", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := len(fr.Tasks) == 1 && fr.Tasks[0].TaskID == ids[0]
			if got != c.want || len(fr.Tasks) > 1 {
				t.Fatalf("second fetch: %+v, want the task re-offered: %v", fr.Tasks, c.want)
			}
			if !c.want {
				return
			}
			// Re-offered once per ReofferAfter, not at every beat, and not
			// after the agent acknowledged it.
			hb.Running = []string{ids[0]}
			f.clock.Add(time.Second)
			if _, err := f.agent.Heartbeat(ctx, hb); err != nil {
				t.Fatal(err)
			}
			f.clock.Add(DefaultReofferAfter)
			if _, err := f.agent.Heartbeat(ctx, hb); err != nil {
				t.Fatal(err)
			}
			if fr, err = f.agent.Fetch(ctx, "uid-a", 0); err != nil || len(fr.Tasks) != 0 {
				t.Errorf("fetch after the acknowledgement: %+v %v", fr.Tasks, err)
			}
			if n := f.srv.offers.len(); n != 0 {
				t.Errorf("%d offers held after the acknowledgement", n)
			}
		})
	}
}
