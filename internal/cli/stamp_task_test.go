package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

// TestServerValidatesStampTasks: the server, with cnperf's registry,
// checks a stamp task's spec like any probe's at creation and fills its
// target with the destination agent's responder (which reflects STAMP).
func TestServerValidatesStampTasks(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := server.New(server.Options{Store: st, UserToken: "user-token-0123456789", AgentToken: "agent-token-0123456789",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Probers: probers()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	agentCl, _ := client.New(ts.URL, "agent-token-0123456789")
	userCl, _ := client.New(ts.URL, "user-token-0123456789")
	for _, a := range []struct{ uid, ip, node string }{{"uid-a", "10.244.1.2", "n1"}, {"uid-b", "10.244.2.2", "n2"}} {
		if _, err := agentCl.Heartbeat(ctx, api.Heartbeat{PodName: a.uid, PodNamespace: "ns", PodUID: a.uid, PodIP: a.ip,
			NodeName: a.node, NodeIP: "10.170.0.1", ResponderAddr: a.ip + ":5201"}); err != nil {
			t.Fatal(err)
		}
	}
	tos := 46 << 2
	cases := []struct {
		name string
		spec probe.Spec
		err  string // "" : accepted
	}{
		{"valid", probe.Spec{Kind: "stamp", Count: 100, TOS: &tos}, ""},
		{"size between base and padding", probe.Spec{Kind: "stamp", Size: 62}, "Extra Padding"},
		{"rate", probe.Spec{Kind: "stamp", RateBps: new(uint64)}, "rate"},
		{"interval too short", probe.Spec{Kind: "stamp", Interval: probe.Duration(10)}, "interval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			run, err := userCl.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: "uid-a", Dst: "uid-b", Spec: &spec}}})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || api.StatusOf(err) != 400 {
					t.Fatalf("CreateRun = %v; want a 400 naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(run.Tasks) != 1 {
				t.Fatalf("run has %d tasks", len(run.Tasks))
			}
			got, err := userCl.GetRun(ctx, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			var sp probe.Spec
			if err := json.Unmarshal(got.Tasks[0].Spec, &sp); err != nil || sp.Kind != probe.KindStamp || sp.Target != "10.244.2.2:5201" {
				t.Errorf("stored spec %s (%v); want kind stamp toward the destination's responder 10.244.2.2:5201", got.Tasks[0].Spec, err)
			}
		})
	}
}
