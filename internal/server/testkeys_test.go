package server

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
)

// TestFetchGivesTestKeys: the fetch answer gives a probe task aimed at a
// responder the test key derived from the destination's heartbeat secret,
// which the destination's checker admits once and which expires with the
// task's deadline; ping tasks get none.
func TestFetchGivesTestKeys(t *testing.T) {
	f := newFixture(t, "sqlite:"+filepath.Join(t.TempDir(), "cnperf.db"), nil)
	ctx := context.Background()
	secret := probe.NewResponderSecret()
	f.beat("uid-a", "pod-a", "10.244.1.12", "node-1")
	if _, err := f.agent.Heartbeat(ctx, api.Heartbeat{PodUID: "uid-b", PodName: "pod-b", PodIP: "10.244.2.7", NodeName: "node-2",
		ResponderAddr: "10.244.2.7:5201", ResponderKey: hex.EncodeToString(secret)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "tcp"}},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "ping"}},
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
		switch at.Spec.Kind {
		case "ping":
			if at.TestKey != "" {
				t.Errorf("ping task got a test key %q", at.TestKey)
			}
		case "tcp":
			keys := probe.NewDerivedKeys(secret)
			if err := keys.Check(at.TestKey, f.clock.Now()); err != nil {
				t.Fatalf("the destination refuses the tcp task's key %q: %v", at.TestKey, err)
			}
			if err := keys.Check(at.TestKey, f.clock.Now()); err == nil {
				t.Error("the key admitted a second session")
			}
			if err := probe.NewDerivedKeys(secret).Check(at.TestKey, at.Deadline); err == nil {
				t.Errorf("the key is still valid at the task's deadline %v", at.Deadline)
			}
		}
	}
}
