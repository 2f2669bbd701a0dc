package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestV2RunVia: a probe task with Via (a Service in front of the
// destination's responder) targets the Service's address; the task still
// names the destination agent. Bad values are in TestBadRunInput.
func TestV2RunVia(t *testing.T) { storetest.ForEach(t, testV2RunVia) }

func testV2RunVia(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	f.twoAgents()
	run, err := f.user.CreateRun(context.Background(), api.RunCreate{Tasks: []api.RunTask{
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "udp"}, Via: "10.96.2.7:5201"},
		{Src: "pod-a", Dst: "pod-b", Spec: &probe.Spec{Kind: "udp"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"10.96.2.7:5201", "10.244.2.7:5201"} {
		var sp probe.Spec
		if err := json.Unmarshal(run.Tasks[i].Spec, &sp); err != nil {
			t.Fatal(err)
		}
		if sp.Target != want || run.Tasks[i].DstPodUID != "uid-b" {
			t.Errorf("task %d: target %q to %q, want %q to uid-b", i, sp.Target, run.Tasks[i].DstPodUID, want)
		}
	}
}
