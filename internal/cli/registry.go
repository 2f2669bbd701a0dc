package cli

import (
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/connect"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/icmp"
	"github.com/cnperf/cnperf/internal/probe/iperf3wire"
	"github.com/cnperf/cnperf/internal/probe/queuewatch"
	"github.com/cnperf/cnperf/internal/probe/rr"
	"github.com/cnperf/cnperf/internal/probe/stamp"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udp"
	"github.com/cnperf/cnperf/internal/probe/wirewatch"
)

// probers builds the registry of cnperf's own measurement engines. Add an
// engine here, explicitly; nothing registers itself.
func probers() *probe.Registry {
	return probe.NewRegistry(tcp.Prober{}, udp.New(), rr.Prober{}, icmp.Ping{}, icmp.Trace{}, stamp.Prober{}, wirewatch.Prober{}, queuewatch.Prober{}, connect.Prober{})
}

// handlers returns the responder side of every engine that needs one, and
// iperf3's protocol on the same port.
func handlers() []engine.Handler {
	return []engine.Handler{tcp.Handler{}, udp.NewHandler(), rr.Handler{}, iperf3wire.NewServer()}
}
