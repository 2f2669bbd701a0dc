package iperf3wire

import (
	"context"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/tcp"
)

// clientCounts are the client's running counts over all its streams.
type clientCounts struct {
	bytes, pkts, lost, retrans int64
	jitterS                    float64 // mean of the receiving streams' jitter
	retransOK                  bool
}

// clientIntervals sums the client's streams into interval reports at its
// -i, as iperf3's client prints its [SUM] lines: from the bytes the client
// counts (sent, or received with -R), udp datagrams (and, received,
// loss and jitter), tcp retransmits of a sending client.
type clientIntervals struct {
	p       Params
	streams []*clientStream
	every   time.Duration
	on      func(probe.Interval)
	start   time.Time
	last    time.Time
	prev    clientCounts
}

func newClientIntervals(p Params, streams []*clientStream, start time.Time, every time.Duration, on func(probe.Interval)) *clientIntervals {
	return &clientIntervals{p: p, streams: streams, every: every, on: on, start: start, last: start}
}

// run reports each interval until ctx ends, then closes done.
func (ci *clientIntervals) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(ci.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if ctx.Err() != nil {
				return // the test's end: finish reports the rest
			}
			ci.report(now)
		}
	}
}

// finish reports the last, partial interval, up to now, from the
// streams' final figures (the result's), so the intervals add up to it.
// The caller waits for run to end first.
func (ci *clientIntervals) finish(now time.Time, final []streamResult) {
	var c clientCounts
	var jit float64
	for _, sr := range final {
		c.bytes += int64(sr.Bytes)
		c.pkts += int64(sr.Packets)
		c.lost += int64(sr.Errors)
		jit += sr.Jitter
		if sr.Retransmits >= 0 {
			c.retrans += int64(sr.Retransmits)
			c.retransOK = true
		}
	}
	if len(final) > 0 {
		c.jitterS = jit / float64(len(final))
	}
	ci.reportCounts(now, c)
}

func (ci *clientIntervals) counts() clientCounts {
	var c clientCounts
	var jit float64
	var rcv int
	for _, st := range ci.streams {
		switch {
		case st.recv != nil:
			u := st.recv.snapshot()
			c.bytes += int64(u.bytes)
			c.pkts += u.highest
			c.lost += u.lost
			jit += u.jitter
			rcv++
		default:
			c.bytes += int64(st.bytes.Load())
			c.pkts += st.pkts.Load()
		}
		if ci.p.TCP && !ci.p.Reverse {
			if n, err := tcp.Retransmits(st.conn); err == nil {
				c.retrans += n
				c.retransOK = true
			}
		}
	}
	if rcv > 0 {
		c.jitterS = jit / float64(rcv)
	}
	return c
}

func (ci *clientIntervals) report(now time.Time) { ci.reportCounts(now, ci.counts()) }

func (ci *clientIntervals) reportCounts(now time.Time, cur clientCounts) {
	secs := now.Sub(ci.last).Seconds()
	if secs <= 0 {
		return
	}
	iv := probe.Interval{StartS: ci.last.Sub(ci.start).Seconds(), EndS: now.Sub(ci.start).Seconds(),
		Bytes: float64(max(cur.bytes-ci.prev.bytes, 0))}
	iv.ThroughputBps = iv.Bytes * 8 / secs
	if ci.p.UDP {
		iv.Packets = probe.Int64(max(cur.pkts-ci.prev.pkts, 0))
		if ci.p.Reverse {
			lost := max(cur.lost-ci.prev.lost, 0)
			pct := 0.0
			if *iv.Packets > 0 {
				pct = 100 * float64(lost) / float64(*iv.Packets)
			}
			iv.LossPct = &pct
			iv.JitterMs = probe.Float(cur.jitterS * 1e3)
		}
	}
	if cur.retransOK {
		iv.Retransmits = probe.Int64(max(cur.retrans-ci.prev.retrans, 0))
	}
	ci.prev, ci.last = cur, now
	ci.on(iv)
}
