package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/server"
)

// meshFlags switch on the server's continuous RTT mesh.
type meshFlags struct {
	interval        time.Duration
	peers           int
	probe           string
	plan, zoneLabel string
}

func (m *meshFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&m.interval, "mesh-interval", 0, "run a ping mesh among the agents this often (e.g. 1m; 0: off); feeds /metrics and the node heat map")
	fl.StringVar(&m.plan, "mesh-plan", pairplan.PlanSample, "the mesh's pair plan: sample (--mesh-peers a round, rotating: every pair within ceil((n-1)/k) rounds), all, or zones (all inside a zone, rotating representatives across)")
	fl.IntVar(&m.peers, "mesh-peers", 3, "peers each agent pings a round with --mesh-plan sample")
	fl.StringVar(&m.zoneLabel, "mesh-zone-label", pairplan.DefaultZoneLabel, "the node label --mesh-plan zones groups agents by (as the agents report it)")
	fl.StringVar(&m.probe, "mesh-probe", "ping", "the mesh's probe: ping, or stamp (also one-way delay, loss and DSCP per direction)")
}

// validate checks the mesh flags before anything starts.
func (m meshFlags) validate() error {
	if m.interval == 0 {
		return nil
	}
	return m.options(nil).Validate()
}

// options are the mesh's options from the flags.
func (m meshFlags) options(log *slog.Logger) mesh.Options {
	return mesh.Options{Interval: m.interval, Plan: m.plan, Peers: m.peers, ZoneLabel: m.zoneLabel, Probe: m.probe, Log: log}
}

// start runs the mesh until ctx ends; the channel closes when it has
// stopped (at once when the mesh is off).
func (m meshFlags) start(ctx context.Context, srv *server.Server, log *slog.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	if m.interval == 0 {
		close(done)
		return done, nil
	}
	s, err := srv.Mesh(m.options(log))
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
