package server

import (
	"context"
	"encoding/hex"
	"path/filepath"
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
