package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
)

// countedAgents is a store that counts agent lookups.
type countedAgents struct {
	store.Store
	one, many atomic.Int32
}

func (c *countedAgents) GetAgent(ctx context.Context, uid string) (store.Agent, error) {
	c.one.Add(1)
	return c.Store.GetAgent(ctx, uid)
}

func (c *countedAgents) GetAgents(ctx context.Context, uids []string, now time.Time) ([]store.Agent, error) {
	c.many.Add(1)
	return c.Store.GetAgents(ctx, uids, now)
}

// TestRunCreateReadsAgentsOnce: creating a run reads its endpoints by uid
// in one store query, not one per endpoint (each a round trip on every
// task's dispatch latency); an endpoint named by pod name is still found,
// and an unknown one refused by its field.
func TestRunCreateReadsAgentsOnce(t *testing.T) {
	f := newFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db", nil)
	ctx := context.Background()
	const pairs = 50
	for i := range 2 * pairs {
		f.beat(fmt.Sprintf("uid-%d", i), fmt.Sprintf("pod-%d", i), fmt.Sprintf("10.244.%d.%d", i/200, i%200+1), fmt.Sprintf("node-%d", i))
	}
	c := &countedAgents{Store: f.st}
	f.srv.st = c
	var rc api.RunCreate
	for i := range pairs {
		rc.Tasks = append(rc.Tasks, api.RunTask{Src: fmt.Sprintf("uid-%d", 2*i), Dst: fmt.Sprintf("uid-%d", 2*i+1), Spec: &probe.Spec{Kind: probe.KindPing}})
	}
	rc.Tasks[0].Dst = "pod-1" // by pod name
	run, err := f.user.CreateRun(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Tasks) != pairs || run.Tasks[0].DstPodUID != "uid-1" {
		t.Fatalf("run of %d tasks, first %+v", len(run.Tasks), run.Tasks[0])
	}
	if one, many := c.one.Load(), c.many.Load(); many != 1 || one > 1 {
		t.Errorf("a run of %d tasks read agents with %d queries by uid list and %d one by one, want 1 and at most 1 (the pod name)", pairs, many, one)
	}
	rc.Tasks[1].Src = "nobody"
	if _, err := f.user.CreateRun(ctx, rc); api.StatusOf(err) != 400 || !strings.Contains(err.Error(), "tasks[1].src") {
		t.Errorf("a run with an unknown source: %v, want 400 naming tasks[1].src", err)
	}
}
