// Package queuewatch is the queue watch (probe kind "queue"): on a node's
// host network it samples, every Interval (default 10 ms) for the
// duration, the backlog of every link's root qdisc in one netlink dump
// (qos.RootCounters), and reads the node's loss counters before and after
// (/proc/net/snmp: TCP retransmissions, UDP receive-buffer drops;
// /proc/net/softnet_stat: receive-backlog drops and squeezes). It reports
// per link the mean, median and largest backlog, how often there was one and the
// drops (probe.QueueWatch), so a suite can tell which node's qdisc held a
// queue while a path was loaded. It sends nothing and needs no privilege
// beyond reading its own namespace.
package queuewatch

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/procfs"
	"github.com/cnperf/cnperf/internal/qos"
)

// Defaults and bounds of a watch.
const (
	DefaultDuration = 10 * time.Second
	DefaultInterval = 10 * time.Millisecond
	MinInterval     = time.Millisecond
	MaxDuration     = time.Hour
)

// Prober is the queue watch.
type Prober struct{}

// Name returns "queue".
func (Prober) Name() string { return probe.KindQueue }

// Validate checks the spec: a target address (its route names the link
// the node sends toward it by), an interval of at least MinInterval.
func (Prober) Validate(spec probe.Spec) error {
	if err := spec.ValidateCommon(false); err != nil {
		return err
	}
	if _, err := netip.ParseAddr(spec.Target); err != nil {
		return fmt.Errorf("target %q: want the peer's IP address: %w", spec.Target, err)
	}
	if spec.Interval != 0 && spec.Interval.D() < MinInterval {
		return fmt.Errorf("interval %v: at least %v", spec.Interval.D(), MinInterval)
	}
	if spec.Duration.D() > MaxDuration {
		return fmt.Errorf("duration %v: at most %v", spec.Duration.D(), MaxDuration)
	}
	return nil
}

// tally accumulates one link's samples.
type tally struct {
	sum   float64
	max   uint64
	busy  int
	drops [2]uint64 // first and last seen
	hist  hist      // nonzero backlogs, for the median
}

// Run samples until the duration ends or ctx ends and reports what it saw.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	if err := p.Validate(spec); err != nil {
		return nil, fmt.Errorf("invalid queue watch: %w", err)
	}
	dst, _ := netip.ParseAddr(spec.Target)
	toward, err := qos.LinkToward("", dst)
	if err != nil {
		return nil, fmt.Errorf("queue watch: the link toward %s: %w", dst, err)
	}
	every := spec.IntervalOr(DefaultInterval)
	now := env.Clock()
	start := now()
	snmp0, serr := procfs.ReadSNMP()
	soft0, ferr := procfs.ReadSoftnet()
	links := map[string]*tally{}
	samples := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := start.Add(spec.DurationOr(DefaultDuration))
	for ctx.Err() == nil && now().Before(deadline) {
		cs, err := qos.RootCounters("")
		if err != nil {
			return nil, fmt.Errorf("queue watch: %w", err)
		}
		samples++
		for name, c := range cs {
			t := links[name]
			if t == nil {
				t = &tally{drops: [2]uint64{c.Drops, c.Drops}, hist: hist{}}
				links[name] = t
			}
			t.sum += float64(c.Backlog)
			t.max = max(t.max, c.Backlog)
			t.hist.add(c.Backlog)
			if c.Backlog > 0 {
				t.busy++
			}
			t.drops[1] = c.Drops
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	elapsed := now().Sub(start)
	if samples == 0 {
		return nil, fmt.Errorf("queue watch: ended before its first sample: %w", context.Cause(ctx))
	}
	w := &probe.QueueWatch{Toward: toward, Samples: samples, IntervalMs: float64(every) / float64(time.Millisecond)}
	for name, t := range links {
		drops := t.drops[1] - t.drops[0]
		if t.max == 0 && drops == 0 && name != toward {
			continue
		}
		w.Links = append(w.Links, probe.LinkQueue{Link: name, MeanBacklogBytes: t.sum / float64(samples),
			P50BacklogBytes: probe.Float(t.hist.median(samples)), MaxBacklogBytes: t.max, BusyPct: 100 * float64(t.busy) / float64(samples), Drops: drops})
	}
	sort.Slice(w.Links, func(i, j int) bool { return w.Links[i].Link < w.Links[j].Link })
	res := &probe.Result{Kind: probe.KindQueue, Tool: "cnperf", Src: toward, Dst: spec.Target, StartedAt: start,
		DurationS: elapsed.Seconds(), Queue: w}
	if snmp1, err := procfs.ReadSNMP(); serr == nil && err == nil {
		w.TCPRetransSegs = delta(snmp0, snmp1, "Tcp", "RetransSegs")
		w.UDPRcvbufErrors = delta(snmp0, snmp1, "Udp", "RcvbufErrors")
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("no /proc/net/snmp counters: %v", firstErr(serr, err)))
	}
	if soft1, err := procfs.ReadSoftnet(); ferr == nil && err == nil {
		w.SoftnetDropped = probe.Int64(int64(soft1.Dropped - soft0.Dropped))
		w.SoftnetSqueezed = probe.Int64(int64(soft1.Squeezed - soft0.Squeezed))
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("no softnet counters: %v", firstErr(ferr, err)))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("sampled the root qdiscs %d times in %.1f s (every %v); %s leads toward %s",
		samples, elapsed.Seconds(), every, toward, spec.Target))
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, "stopped early: "+context.Cause(ctx).Error())
	}
	return res, nil
}

func delta(a, b procfs.SNMP, proto, name string) *int64 {
	x, ok1 := a.Get(proto, name)
	y, ok2 := b.Get(proto, name)
	if !ok1 || !ok2 {
		return nil
	}
	return probe.Int64(y - x)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
