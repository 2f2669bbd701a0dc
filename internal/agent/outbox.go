package agent

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

// Delivery retry bounds.
const (
	deliverTimeout = 10 * time.Second
	retryMin       = 250 * time.Millisecond
	retryMax       = 5 * time.Second
)

// outbox delivers result reports until the server acknowledges each. A
// report keeps its ReportID across retries, so the server stores it once.
type outbox struct {
	cl  *client.Client
	log *slog.Logger

	mu      sync.Mutex // guards pending
	pending []*delivery
	kick    chan struct{}
}

type delivery struct {
	rep      api.Report
	attempts int
	next     time.Time
}

func newOutbox(cl *client.Client, log *slog.Logger) *outbox {
	return &outbox{cl: cl, log: log, kick: make(chan struct{}, 1)}
}

// add queues a report for delivery now.
func (o *outbox) add(rep api.Report) {
	o.mu.Lock()
	o.pending = append(o.pending, &delivery{rep: rep})
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// len returns the number of reports not yet acknowledged.
func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// due returns the deliveries whose next attempt is due, and when the next
// one after them is.
func (o *outbox) due(now time.Time) ([]*delivery, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*delivery
	var next time.Time
	for _, d := range o.pending {
		if !d.next.After(now) {
			out = append(out, d)
		} else if next.IsZero() || d.next.Before(next) {
			next = d.next
		}
	}
	return out, next
}

func (o *outbox) remove(d *delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, p := range o.pending {
		if p == d {
			o.pending = append(o.pending[:i], o.pending[i+1:]...)
			return
		}
	}
}

// run delivers until ctx ends.
func (o *outbox) run(ctx context.Context) {
	for {
		ds, next := o.due(time.Now())
		for _, d := range ds {
			if ctx.Err() != nil {
				return
			}
			o.send(ctx, d)
		}
		if len(ds) > 0 {
			continue // look again: sending took time, more may be due
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-o.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// send makes one delivery attempt. Acknowledged, or refused for good (a
// 4xx other than 408 and 429: the server will never take it), the report
// is dropped; otherwise it is retried with exponential back-off.
func (o *outbox) send(ctx context.Context, d *delivery) {
	sctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	reply, err := o.cl.Report(sctx, d.rep)
	cancel()
	log := o.log.With("task_id", d.rep.TaskID, "report_id", d.rep.ReportID)
	if err == nil {
		o.remove(d)
		if d.attempts > 0 || reply.Duplicate {
			log.Info("result delivered", "attempts", d.attempts+1, "duplicate", reply.Duplicate, "state", reply.State)
		}
		return
	}
	st := api.StatusOf(err)
	if st >= 400 && st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests {
		o.remove(d)
		log.Warn("result refused by the server; dropped", "status", st, "err", err)
		return
	}
	d.attempts++
	wait := retryMin << min(d.attempts-1, 5)
	wait = min(wait, retryMax)
	d.next = time.Now().Add(wait)
	if d.attempts == 1 || d.attempts%10 == 0 {
		log.Warn("result delivery failed; retrying", "attempts", d.attempts, "retry_in", wait, "err", err)
	}
}

// drain waits until every report is acknowledged or grace has passed.
func (o *outbox) drain(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for o.len() > 0 && time.Now().Before(deadline) {
		o.mu.Lock()
		for _, d := range o.pending {
			d.next = time.Time{} // retry at once
		}
		o.mu.Unlock()
		select {
		case o.kick <- struct{}{}:
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
}
