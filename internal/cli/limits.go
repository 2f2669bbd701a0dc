package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/server"
)

// limitFlags are `cnperf server`'s --max-* and --min-* flags (server.Limits;
// the defaults are server.DefaultLimits, see docs/control-plane.md).
type limitFlags struct {
	l                    server.Limits
	maxRate, minQdiscStr string
}

func (f *limitFlags) register(cmd *cobra.Command) {
	d := server.DefaultLimits()
	f.l = d
	fl := cmd.Flags()
	fl.DurationVar(&f.l.MaxDuration, "max-task-duration", d.MaxDuration, "longest probe duration or tool run (-t, ping -c × -i, -w)")
	fl.IntVar(&f.l.MaxStreams, "max-streams", d.MaxStreams, "most parallel streams of a tcp probe or iperf3 -P")
	fl.StringVar(&f.maxRate, "max-rate", fmt.Sprint(d.MaxRateBps), "highest rate a task may ask (bit/s, k/M/G suffixes)")
	fl.Float64Var(&f.l.MaxPacketRate, "max-packet-rate", d.MaxPacketRate, "highest packet rate (packets/s) of a udp probe, ping or iperf2 -b NNpps")
	fl.IntVar(&f.l.MaxPingCount, "max-ping-count", d.MaxPingCount, "most echoes of one ping task")
	fl.DurationVar(&f.l.MinPingInterval, "min-ping-interval", d.MinPingInterval, "shortest interval between echoes")
	fl.IntVar(&f.l.MaxPingSize, "max-ping-size", d.MaxPingSize, "largest ping payload (bytes)")
	fl.DurationVar(&f.l.MaxTaskTimeout, "max-task-timeout", d.MaxTaskTimeout, "longest timeout of a task, given or implied")
	fl.StringVar(&f.minQdiscStr, "min-qdisc-rate", fmt.Sprint(d.MinQdiscRateBps), "lowest rate of a task's QoS set-up (bit/s, k/M/G suffixes)")
	fl.DurationVar(&f.l.MaxQdiscLife, "max-qdisc-lifetime", d.MaxQdiscLife, "longest a task's QoS set-up may stay (its task's timeout)")
	fl.IntVar(&f.l.MaxTasks, "max-tasks-per-request", d.MaxTasks, "most tasks in one create request (at most 1000)")
	fl.IntVar(&f.l.MaxRunsInFlight, "max-runs-in-flight", d.MaxRunsInFlight, "most unfinished runs per user token")
	fl.IntVar(&f.l.MaxAgents, "max-agents", d.MaxAgents, "most agents the server holds in memory")
}

// limits returns the limits the flags set, refusing values that make no
// sense.
func (f *limitFlags) limits() (server.Limits, error) {
	l := f.l
	var err error
	if l.MaxRateBps, err = probe.ParseRate(f.maxRate); err != nil || l.MaxRateBps == 0 {
		return l, fmt.Errorf("--max-rate %q: want a rate above 0 like 10G", f.maxRate)
	}
	if l.MinQdiscRateBps, err = probe.ParseRate(f.minQdiscStr); err != nil || l.MinQdiscRateBps == 0 {
		return l, fmt.Errorf("--min-qdisc-rate %q: want a rate above 0 like 1M", f.minQdiscStr)
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"--max-task-duration", l.MaxDuration > 0}, {"--max-streams", l.MaxStreams > 0},
		{"--max-packet-rate", l.MaxPacketRate > 0}, {"--max-ping-count", l.MaxPingCount > 0},
		{"--min-ping-interval", l.MinPingInterval > 0}, {"--max-ping-size", l.MaxPingSize > 0},
		{"--max-task-timeout", l.MaxTaskTimeout > 0}, {"--max-qdisc-lifetime", l.MaxQdiscLife > 0},
		{"--max-tasks-per-request", l.MaxTasks > 0 && l.MaxTasks <= 1000},
		{"--max-runs-in-flight", l.MaxRunsInFlight > 0}, {"--max-agents", l.MaxAgents > 0},
	} {
		if !c.ok {
			return l, fmt.Errorf("%s: out of range (see cnperf server --help)", c.name)
		}
	}
	return l, nil
}
