package rr

import (
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
)

// ReportEvery is how often rr hands a progress report to Env.OnInterval:
// iperf3's default interval. rr's Interval spaces transactions, so a longer
// spacing stretches the report period to it and each report holds one.
const ReportEvery = time.Second

// progress collects one report period's transactions for Env.OnInterval,
// as tcp and udp report their intervals. The transaction loop feeds it
// between transactions, from the clock reading it already has, so it adds
// no clock reading to a transaction; the callback runs on the loop's
// thread, between transactions.
type progress struct {
	on    func(probe.Interval)
	every int64 // ns
	begin int64 // the loop's start, ns since the epoch
	start int64 // this period's start
	sent0 int64 // the tally's sent and done at start
	done0 int64
	rtt   *stats.Recorder // ns, this period's round trips
}

// newProgress returns nil (no reports) when on is nil.
func newProgress(on func(probe.Interval), cfg config, begin time.Time) *progress {
	if on == nil {
		return nil
	}
	every := max(ReportEvery, cfg.interval)
	b := begin.UnixNano()
	return &progress{on: on, every: int64(every), begin: b, start: b, rtt: stats.NewRecorder()}
}

// at reports the period that ended by now, if one did.
func (p *progress) at(now int64, t *tally) {
	if p == nil || now-p.start < p.every {
		return
	}
	p.report(now, t)
}

// finish reports the last, partial period (iperf3 prints it too) when it
// saw a request.
func (p *progress) finish(now int64, t *tally) {
	if p == nil || t.sent == p.sent0 || now <= p.start {
		return
	}
	p.report(now, t)
}

func (p *progress) report(now int64, t *tally) {
	secs := float64(now-p.start) / 1e9
	n, sent := t.done-p.done0, t.sent-p.sent0
	iv := probe.Interval{StartS: float64(p.start-p.begin) / 1e9, EndS: float64(now-p.begin) / 1e9,
		Transactions: &n, TransactionsPerS: probe.Float(float64(n) / secs)}
	if n > 0 {
		s := p.rtt.Summary(1e-6)
		iv.RTTP50ms, iv.RTTP99ms = probe.Float(s.P50), probe.Float(s.P99)
	}
	if sent > 0 {
		iv.LossPct = probe.Float(100 * float64(sent-n) / float64(sent))
	}
	p.on(iv)
	p.start, p.sent0, p.done0 = now, t.sent, t.done
	p.rtt = stats.NewRecorder()
}
