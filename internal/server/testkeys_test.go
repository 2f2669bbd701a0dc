package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestFetchGivesTestKeys: the fetch answer gives a probe task aimed at a
// responder the test key derived from the destination's heartbeat secret,
// which the destination's checker admits once, which expires with the
// task's deadline and which binds the task's test (a 1 s, 1-stream tcp
// task's key admits no 64-stream reverse session, a udp task's no rate
// above the udp default); ping tasks get none.
func TestFetchGivesTestKeys(t *testing.T) {
	f := newFixture(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"), nil)
	ctx := context.Background()
	secret := probe.NewResponderSecret()
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	if _, err := f.agent.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-b", PodName: "pod-b", PodIP: "10.244.2.7", NodeName: "node-2",
		ResponderAddr: "10.244.2.7:5201", ResponderKey: hex.EncodeToString(secret)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.user.CreateRun(ctx, api.RunCreate{AllowConcurrency: true, Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second)}},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "ping"}},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "udp"}},
	}}); err != nil {
		t.Fatal(err)
	}
	fr, err := f.agent.Fetch(ctx, "uid-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Tasks) != 3 {
		t.Fatalf("fetched %d tasks, want 3: %+v", len(fr.Tasks), fr.Tasks)
	}
	rate := func(v uint64) *uint64 { return &v }
	for _, at := range fr.Tasks {
		switch at.Spec.Kind {
		case "ping":
			if at.TestKey != "" {
				t.Errorf("ping task got a test key %q", at.TestKey)
			}
		case "udp":
			g, err := probe.NewDerivedKeys(secret).Check(at.TestKey, f.clock.Now())
			if err != nil || g.Bounds == nil {
				t.Fatalf("the udp task's key %q: %+v %v", at.TestKey, g, err)
			}
			if err := g.Bounds.Admits(probe.Spec{Kind: "udp", RateBps: rate(1_000_000)}); err != nil {
				t.Errorf("the udp task's key refuses the task's own test: %v", err)
			}
			if err := g.Bounds.Admits(probe.Spec{Kind: "udp", RateBps: rate(10_000_000_000)}); err == nil {
				t.Error("the udp task's key admits 10 Gbit/s")
			}
		case "tcp":
			keys := probe.NewDerivedKeys(secret)
			g, err := keys.Check(at.TestKey, f.clock.Now())
			if err != nil || g.Bounds == nil {
				t.Fatalf("the destination refuses the tcp task's key %q (or it binds nothing): %+v %v", at.TestKey, g, err)
			}
			if err := g.Bounds.Admits(probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second)}); err != nil {
				t.Errorf("the tcp task's key refuses the task's own test: %v", err)
			}
			for _, more := range []probe.Spec{
				{Kind: "tcp", Duration: probe.Duration(time.Second), Streams: 64, Reverse: true},
				{Kind: "tcp", Duration: probe.Duration(45 * time.Second)},
			} {
				if err := g.Bounds.Admits(more); err == nil {
					t.Errorf("the key of a 1 s, 1-stream tcp task admits %+v", more)
				}
			}
			if end := g.End(f.clock.Now()); end.IsZero() || end.After(f.clock.Now().Add(time.Second+probe.SessionGrace)) {
				t.Errorf("a session of the 1 s task may run until %v", end)
			}
			if _, err := keys.Check(at.TestKey, f.clock.Now()); err == nil {
				t.Error("the key admitted a second session")
			}
			if _, err := probe.NewDerivedKeys(secret).Check(at.TestKey, at.Deadline); err == nil {
				t.Errorf("the key is still valid at the task's deadline %v", at.Deadline)
			}
		}
	}
}

// answeringBus is a Bus that answers each request for a responder secret
// as the replica the destination beats on would: it delivers the secret
// (from secrets) to srv, from another goroutine.
type answeringBus struct {
	srv     *Server
	secrets map[string][]byte
	wg      sync.WaitGroup

	mu    sync.Mutex // guards wants
	wants [][]string // the destinations asked for, per Publish that asked
}

func (b *answeringBus) Publish(msgs ...string) {
	var asked []string
	for _, raw := range msgs {
		var m clusterMsg
		if json.Unmarshal([]byte(raw), &m) == nil && m.Kind == msgWantSecret {
			asked = append(asked, m.Agent)
		}
	}
	if len(asked) == 0 {
		return
	}
	b.mu.Lock()
	b.wants = append(b.wants, asked)
	b.mu.Unlock()
	b.wg.Go(func() {
		for _, uid := range asked {
			b.srv.applyRemote(clusterMsg{Kind: msgSecret, Agent: uid, Data: hex.EncodeToString(b.secrets[uid])})
		}
	})
}

func (b *answeringBus) Run(ctx context.Context, _ func([]string)) error {
	<-ctx.Done()
	return nil
}

// TestMissingSecretsAskedTogether: a fetch whose tasks aim at two
// destinations whose secrets this replica does not hold (they beat on
// another replica) asks for both in one bus message before it waits, and
// gives each task the key derived from the secret that arrived. (Asked
// one at a time, each destination cost its own wait: the second was
// asked only once the first had arrived, 50 ms polls later.)
func TestMissingSecretsAskedTogether(t *testing.T) {
	f := newFixture(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"), nil)
	ctx := context.Background()
	bus := &answeringBus{srv: f.srv, secrets: map[string][]byte{"uid-b": probe.NewResponderSecret(), "uid-c": probe.NewResponderSecret()}}
	t.Cleanup(bus.wg.Wait)
	f.srv.opts.Bus = bus
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2") // no secret here
	f.beat("uid-c", "pod-c", "10.244.3.7", "node-3") // nor here
	tcp := &probe.Spec{Kind: "tcp", Duration: probe.Duration(time.Second)}
	if _, err := f.user.CreateRun(ctx, api.RunCreate{AllowConcurrency: true, Tasks: []api.RunTask{
		{Src: "uid-a", Dst: "uid-b", Spec: tcp}, {Src: "uid-a", Dst: "uid-c", Spec: tcp},
	}}); err != nil {
		t.Fatal(err)
	}
	fr, err := f.agent.Fetch(ctx, "uid-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Tasks) != 2 {
		t.Fatalf("fetched %d tasks, want 2: %+v", len(fr.Tasks), fr.Tasks)
	}
	for _, at := range fr.Tasks {
		if _, err := probe.NewDerivedKeys(bus.secrets[at.DstPodUID]).Check(at.TestKey, f.clock.Now()); err != nil {
			t.Errorf("task to %s: its key %q is not the one its destination's secret gives: %v", at.DstPodUID, at.TestKey, err)
		}
	}
	bus.mu.Lock()
	defer bus.mu.Unlock()
	if len(bus.wants) != 1 || len(bus.wants[0]) != 2 {
		t.Errorf("secrets asked for in %d messages %v; want both in one", len(bus.wants), bus.wants)
	}
}

// TestSecretWaitWokenBySet: a wait for a secret not yet known ends when
// set stores it (no deadline: only the arrival can end it), and a wait
// whose context ends returns nil and leaves no waiter behind.
func TestSecretWaitWokenBySet(t *testing.T) {
	k := newTestKeys()
	secret := probe.NewResponderSecret()
	got := make(chan []byte, 1)
	go func() { got <- k.wait(context.Background(), "uid-b") }()
	for registered := false; !registered; {
		k.mu.Lock()
		registered = len(k.waits["uid-b"]) == 1
		k.mu.Unlock()
		if !registered {
			time.Sleep(time.Millisecond)
		}
	}
	k.set("uid-b", secret)
	if s := <-got; !bytes.Equal(s, secret) {
		t.Errorf("the wait returned %x, want the secret set %x", s, secret)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s := k.wait(ctx, "uid-c"); s != nil {
		t.Errorf("a wait whose context ended returned %x", s)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.waits) != 0 {
		t.Errorf("waiters left behind: %v", k.waits)
	}
}
