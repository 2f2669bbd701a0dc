package k8s

import (
	"context"
	"testing"

	"github.com/cnperf/cnperf/internal/api"
)

type fakeServer struct{ ServerAPI }

func (fakeServer) Agents(context.Context, bool) ([]api.Agent, error) {
	return []api.Agent{{PodUID: "a"}, {PodUID: "b"}, {PodUID: "gone"}}, nil
}

func TestLiveAPI(t *testing.T) {
	l := LiveAPI{ServerAPI: fakeServer{}, Live: map[string]bool{"a": true, "b": true}}
	as, _ := l.Agents(context.Background(), false)
	if len(as) != 2 {
		t.Fatalf("agents %v: a deleted pod's agent must not be used", as)
	}
}
