package k8s

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

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

// lateServer lists agent "b" online only from its third listing on, and
// "c" never; "x" is offline.
type lateServer struct {
	ServerAPI
	calls atomic.Int32
	err   error
}

func (s *lateServer) Agents(context.Context, bool) ([]api.Agent, error) {
	n := s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	as := []api.Agent{{PodUID: "a", Status: "free"}, {PodUID: "x", Status: "offline"}}
	if n >= 3 {
		as = append(as, api.Agent{PodUID: "b", Status: "busy"})
	}
	return as, nil
}

func TestWaitOnline(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		live    map[string]bool
		err     error
		missing []string
		wantErr bool
		calls   int32 // at least
	}{
		{name: "all online at once", live: map[string]bool{"a": true}, calls: 1},
		{name: "one registers late", live: map[string]bool{"a": true, "b": true}, calls: 3},
		{name: "one never", live: map[string]bool{"a": true, "b": true, "c": true}, missing: []string{"c"}, calls: 3},
		{name: "offline counts as missing", live: map[string]bool{"x": true}, missing: []string{"x"}, calls: 3},
		{name: "server unreachable", live: map[string]bool{"a": true}, err: errors.New("refused"), wantErr: true, calls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &lateServer{err: tc.err}
			l := LiveAPI{ServerAPI: srv, Live: tc.live}
			missing, err := l.WaitOnline(ctx, 100*time.Millisecond, 10*time.Millisecond)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(missing, tc.missing) {
				t.Errorf("missing %v, want %v", missing, tc.missing)
			}
			if srv.calls.Load() < tc.calls {
				t.Errorf("%d listings, want at least %d", srv.calls.Load(), tc.calls)
			}
		})
	}
}
