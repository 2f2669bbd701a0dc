package iperf3wire

import (
	"context"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/probe/tcp"
)

// reportInterval is how often the server samples its streams for its
// document's intervals: iperf3's server reports at its own -i, 1 s by
// default (a client's -i is not sent to the server).
const reportInterval = time.Second

// maxIntervals bounds the intervals a test's document keeps (an hour's),
// so that a day-long test asking for --get-server-output holds a few MB at
// most; later ones are not recorded.
const maxIntervals = 3600

// intervalLog samples a test's streams into the intervals of the server's
// document, as iperf3's server reports them: per stream and summed over the
// streams of the test's asked-for direction, omitted while -O's seconds
// run, and timed from the end of those seconds after.
type intervalLog struct {
	mu      sync.Mutex
	p       Params
	streams []*stream
	clock   *testClock
	start   time.Time
	last    time.Time
	prev    []ivCounts
	out     []iperf3json.Interval
	done    bool // finish ran: later ticks add nothing
}

// ivCounts are a stream's running counts at one sample.
type ivCounts struct {
	bytes         uint64
	pkts, lost    int64
	retrans       int64
	jitterSeconds float64
}

func newIntervalLog(p Params, streams []*stream, clock *testClock, start time.Time) *intervalLog {
	l := &intervalLog{p: p, streams: streams, clock: clock, start: start, last: start, prev: make([]ivCounts, len(streams))}
	return l
}

// run samples every reportInterval until ctx ends.
func (l *intervalLog) run(ctx context.Context) {
	t := time.NewTicker(reportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			l.sample(now)
		}
	}
}

func (l *intervalLog) counts(st *stream) ivCounts {
	var c ivCounts
	switch {
	case st.recv != nil:
		u := st.recv.snapshot()
		c.bytes, c.pkts, c.lost, c.jitterSeconds = u.bytes, u.highest, u.lost, u.jitter
	default:
		c.bytes, c.pkts = st.bytes.Load(), st.pkts.Load()
		if st.sender && st.conn != nil {
			c.retrans, _ = tcp.Retransmits(st.conn)
		}
	}
	return c
}

// sample adds the interval from the last sample to now.
func (l *intervalLog) sample(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done || len(l.out) >= maxIntervals {
		return
	}
	// An interval that ends by -O's end (give or take the timers'
	// skew: the tick and the reset are due at the same instant) is
	// omitted and timed from the start; the rest from -O's end.
	omitEnd := l.start.Add(time.Duration(l.p.Omit) * time.Second)
	omitted := l.p.Omit > 0 && now.Before(omitEnd.Add(reportInterval/10))
	base := l.clock.from()
	if omitted {
		base = l.start
	}
	t0, t1 := l.last.Sub(base).Seconds(), now.Sub(base).Seconds()
	if t0 < 0 {
		t0 = 0
	}
	l.last = now
	mainSends := l.p.Reverse
	iv := iperf3json.Interval{Streams: []iperf3json.Sum{}}
	sum := iperf3json.Sum{Start: t0, End: t1, Seconds: t1 - t0, Omitted: ptr(omitted), Sender: mainSends}
	var pkts, lost int64
	for i, st := range l.streams {
		cur := l.counts(st)
		prev := l.prev[i]
		l.prev[i] = cur
		if cur.bytes < prev.bytes { // -O's end reset the received count
			prev.bytes = 0
		}
		s := iperf3json.Sum{Socket: st.id, Start: t0, End: t1, Seconds: t1 - t0, Bytes: float64(cur.bytes - prev.bytes),
			Omitted: ptr(omitted), Sender: st.sender}
		s.BitsPerSecond = rate(s.Bytes, s.Seconds)
		switch {
		case l.p.TCP && st.sender:
			s.Retransmits = ptr(cur.retrans - prev.retrans)
		case l.p.UDP && st.recv != nil:
			s.Packets, s.LostPackets = ptr(cur.pkts-prev.pkts), ptr(cur.lost-prev.lost)
			s.JitterMs = ptr(cur.jitterSeconds * 1000)
			s.LostPercent = ptr(percent(float64(*s.LostPackets), float64(*s.Packets)))
		case l.p.UDP:
			s.Packets = ptr(cur.pkts - prev.pkts)
		}
		iv.Streams = append(iv.Streams, s)
		if st.sender != mainSends {
			continue
		}
		sum.Bytes += s.Bytes
		if s.Retransmits != nil {
			sum.Retransmits = ptr(deref(sum.Retransmits) + *s.Retransmits)
		}
		if s.Packets != nil {
			pkts += *s.Packets
		}
		if s.LostPackets != nil {
			lost += *s.LostPackets
		}
	}
	sum.BitsPerSecond = rate(sum.Bytes, sum.Seconds)
	if l.p.UDP {
		sum.Packets = ptr(pkts)
		if !mainSends {
			sum.LostPackets, sum.LostPercent = ptr(lost), ptr(percent(float64(lost), float64(pkts)))
		}
	}
	iv.Sum = sum
	l.out = append(l.out, iv)
}

// finish takes the last, partial interval at end when it is long enough
// to say something (a tenth of an interval, as iperf3 judges) and returns
// the intervals.
func (l *intervalLog) finish(end time.Time) []iperf3json.Interval {
	l.mu.Lock()
	short := end.Sub(l.last) < reportInterval/10
	l.mu.Unlock()
	if !short {
		l.sample(end)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	if l.out == nil {
		return []iperf3json.Interval{}
	}
	return l.out
}
