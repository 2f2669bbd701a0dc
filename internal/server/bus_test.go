package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// recordingBus is a Bus that keeps the messages of each Publish call.
type recordingBus struct {
	mu    sync.Mutex // guards calls
	calls [][]string
}

func (b *recordingBus) Publish(msgs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, slices.Clone(msgs))
}

func (b *recordingBus) Run(ctx context.Context, _ func([]string)) error {
	<-ctx.Done()
	return nil
}

// take returns the calls so far and forgets them.
func (b *recordingBus) take() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

// TestCreatedTasksWakeOtherReplicasInOnePublish: the wake-ups of the
// tasks created by one call (a run, or a v1 task list) reach the bus in
// one Publish, so the replicas holding their sources' sessions hear of
// every task in the same NOTIFY. Published one at a time, the first went
// alone and the others a NOTIFY round trip later, on their dispatch
// latency.
func TestCreatedTasksWakeOtherReplicasInOnePublish(t *testing.T) {
	const n = 5
	for _, tc := range []struct {
		name   string
		create func(f *fixture) error
	}{
		{"run", func(f *fixture) error {
			var rc api.RunCreate
			for i := range n {
				rc.Tasks = append(rc.Tasks, api.RunTask{Src: fmt.Sprintf("uid-%d", 2*i), Dst: fmt.Sprintf("uid-%d", 2*i+1), Spec: &probe.Spec{Kind: probe.KindPing}})
			}
			_, err := f.user.CreateRun(context.Background(), rc)
			return err
		}},
		{"v1 tasks", func(f *fixture) error {
			var tcs []api.TaskCreate
			for i := range n {
				tc := pingTask("-c 1")
				tc.SrcPodUID, tc.SrcPodIP = fmt.Sprintf("uid-%d", 2*i), fmt.Sprintf("10.244.0.%d", 2*i+1)
				tc.DstPodUID, tc.DstPodIP = fmt.Sprintf("uid-%d", 2*i+1), fmt.Sprintf("10.244.0.%d", 2*i+2)
				tcs = append(tcs, tc)
			}
			_, err := f.user.CreateTasks(context.Background(), tcs)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
			bus := &recordingBus{}
			f.srv.opts.Bus = bus
			f.srv.disp.share = f.srv.publish
			for i := range 2 * n {
				f.beat(fmt.Sprintf("uid-%d", i), fmt.Sprintf("pod-%d", i), fmt.Sprintf("10.244.0.%d", i+1), fmt.Sprintf("node-%d", i))
			}
			bus.take() // the agents' own wake-ups
			if err := tc.create(f); err != nil {
				t.Fatal(err)
			}
			calls := bus.take()
			var woken []string
			for _, c := range calls {
				for _, raw := range c {
					var m clusterMsg
					if err := json.Unmarshal([]byte(raw), &m); err != nil {
						t.Fatalf("message %q: %v", raw, err)
					}
					if m.Kind == msgPending {
						woken = append(woken, m.Agent)
					}
				}
			}
			slices.Sort(woken)
			want := []string{"uid-0", "uid-2", "uid-4", "uid-6", "uid-8"}
			if len(calls) != 1 || !slices.Equal(woken, want) {
				t.Errorf("creating %d tasks published %d times, waking %v; want one call waking %v", n, len(calls), woken, want)
			}
		})
	}
}
