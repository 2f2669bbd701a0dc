package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/server"
)

// meshFlags switch on the server's continuous RTT mesh.
type meshFlags struct {
	interval time.Duration
	peers    int
	probe    string
}

func (m *meshFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&m.interval, "mesh-interval", 0, "run a ping mesh among the agents this often (e.g. 1m; 0: off); feeds /metrics and the node heat map")
	fl.IntVar(&m.peers, "mesh-peers", 3, "peers each agent pings in the mesh (chosen by rendezvous hashing)")
	fl.StringVar(&m.probe, "mesh-probe", "ping", "the mesh's probe: ping, or stamp (also one-way delay, loss and DSCP per direction)")
}

// validate checks the mesh flags before anything starts.
func (m meshFlags) validate() error {
	if m.interval == 0 {
		return nil
	}
	return mesh.Options{Interval: m.interval, Peers: m.peers, Probe: m.probe}.Validate()
}

// start runs the mesh until ctx ends; the channel closes when it has
// stopped (at once when the mesh is off).
func (m meshFlags) start(ctx context.Context, srv *server.Server, log *slog.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	if m.interval == 0 {
		close(done)
		return done, nil
	}
	s, err := srv.Mesh(mesh.Options{Interval: m.interval, Peers: m.peers, Probe: m.probe, Log: log})
	if err != nil {
		close(done)
		return done, err
	}
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return done, nil
}
