package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// countedReads is a store that counts the reads a start could make
// besides its update: the task and the agent's credential.
type countedReads struct {
	store.Store
	task, cred atomic.Int32
}

func (c *countedReads) GetTask(ctx context.Context, id string) (store.Task, error) {
	c.task.Add(1)
	return c.Store.GetTask(ctx, id)
}

func (c *countedReads) GetCredential(ctx context.Context, uid string) (store.Credential, error) {
	c.cred.Add(1)
	return c.Store.GetCredential(ctx, uid)
}

// TestSessionStartReadsNothing: a session's start of its own task is the
// store's update alone (the task is read only when the update refuses,
// and the session's right to act for its agent is not read again within
// credCacheTTL), while another agent's start of it is still 403 and
// leaves it dispatched.
func TestSessionStartReadsNothing(t *testing.T) {
	f := sessionFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	ctx := context.Background()
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	onOffer, offers := offerSink()
	s := openSession(t, f.agent, helloOf("uid-a", "pod-a", "10.244.1.12", "node-1"), onOffer)
	sb := openSession(t, f.agent, helloOf("uid-b", "pod-b", "10.244.2.7", "node-2"), nil)
	if err := s.Pull(); err != nil {
		t.Fatal(err)
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	if fr := nextOffer(t, offers, 2*time.Second); len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != ids[0] {
		t.Fatalf("offer %+v, want task %s", fr, ids[0])
	}
	c := &countedReads{Store: f.st}
	f.srv.st = c
	if err := sb.Start(ctx, ids[0]); api.StatusOf(err) != http.StatusForbidden {
		t.Errorf("B's session starts A's task: %v, want 403", err)
	}
	if got, err := f.st.GetTask(ctx, ids[0]); err != nil || got.State != store.TaskDispatched {
		t.Fatalf("A's task after B's start: %s %v, want dispatched", got.State, err)
	}
	c.task.Store(0)
	c.cred.Store(0)
	if err := s.Start(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got, err := f.st.GetTask(ctx, ids[0]); err != nil || got.State != store.TaskRunning {
		t.Fatalf("A's task after A's start: %s %v, want running", got.State, err)
	}
	if task, cred := c.task.Load(), c.cred.Load(); task != 0 || cred != 0 {
		t.Errorf("A's start read the task %d times and the credential %d times, want 0 and 0", task, cred)
	}
}
