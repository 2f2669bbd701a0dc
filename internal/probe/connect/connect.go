// Package connect is the connect sampler (probe kind "connect"): every
// Interval (default 5 ms) for the duration it starts a TCP connect to
// the target, each bounded by Timeout (default 500 ms, below the
// kernel's first SYN retransmission at 1 s, so each attempt sends one
// SYN and its fate is the path's at its start), closes each connection
// as soon as it is made, and reports the runs of attempts with one
// outcome (ok, refused, timeout, error) with their start times
// (probe.ConnectTimeline). Attempts overlap, so the sampling goes on at
// the interval while a policy drops SYNs; a suite reads from the
// timeline when a change (a NetworkPolicy made) took effect. A responder
// sees each attempt as a connection without a preface and drops it.
//
// With Count set it holds connections instead (a connection limit's
// probe): Count connects, one every Interval, each bounded by Timeout;
// every connection made stays open until the last attempt has ended,
// is then read briefly to tell whether the peer closed it meanwhile,
// and closed. The timeline's Held counts those open at once then.
package connect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Defaults and bounds.
const (
	DefaultInterval = 5 * time.Millisecond
	MinInterval     = time.Millisecond
	DefaultTimeout  = 500 * time.Millisecond
	MaxTimeout      = 900 * time.Millisecond
	DefaultDuration = 10 * time.Second
	MaxDuration     = time.Minute
	// MaxHeld bounds Count: a responder admits 64 connections awaiting
	// their preface from one address (docs/probes.md), and holds a
	// silent one 5 s.
	MaxHeld = 64
	// openCheck is how long a held connection is read to tell whether
	// the peer closed it (a close or reset arrives at once; silence is
	// open).
	openCheck = 20 * time.Millisecond
)

// Prober is the connect sampler.
type Prober struct{}

// Name returns "connect".
func (Prober) Name() string { return probe.KindConnect }

// Validate checks the spec: a HOST:PORT target, an interval of at least
// MinInterval, a timeout of at most MaxTimeout, a duration of at most
// MaxDuration.
func (Prober) Validate(spec probe.Spec) error {
	var errs []error
	if err := spec.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	if spec.Interval != 0 && spec.Interval.D() < MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: at least %v", spec.Interval.D(), MinInterval))
	}
	if spec.Timeout < 0 || spec.Timeout.D() > MaxTimeout {
		errs = append(errs, fmt.Errorf("timeout %v: 0 to %v (one SYN per attempt: the kernel resends it after 1 s)", spec.Timeout.D(), MaxTimeout))
	}
	if spec.Duration.D() > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %v: at most %v", spec.Duration.D(), MaxDuration))
	}
	if spec.Count > MaxHeld {
		errs = append(errs, fmt.Errorf("count %d: at most %d connections held", spec.Count, MaxHeld))
	}
	if spread := time.Duration(spec.Count) * spec.IntervalOr(DefaultInterval); spread > MaxDuration {
		errs = append(errs, fmt.Errorf("count %d at interval %v: the attempts span %v, at most %v", spec.Count, spec.IntervalOr(DefaultInterval), spread, MaxDuration))
	}
	return errors.Join(errs...)
}

// attempt is one connect: its start and outcome.
type attempt struct {
	start   time.Time
	outcome string
}

// Run samples until the duration ends or ctx ends.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	if err := p.Validate(spec); err != nil {
		return nil, fmt.Errorf("invalid connect sampler: %w", err)
	}
	every, timeout := spec.IntervalOr(DefaultInterval), spec.TimeoutOr(DefaultTimeout)
	d := net.Dialer{Timeout: timeout}
	if spec.Source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(spec.Source)}
	}
	if spec.Count > 0 {
		return hold(ctx, spec, env, d, every, timeout)
	}
	now := env.Clock()
	start := now()
	deadline := start.Add(spec.DurationOr(DefaultDuration))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards attempts
		attempts []attempt
	)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil && now().Before(deadline) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			// The attempt's time is taken right before its connect, not
			// when it was scheduled: a busy machine starts goroutines late.
			t := now()
			c, err := d.DialContext(actx, "tcp", spec.Target)
			out := outcome(err)
			if c != nil {
				_ = c.Close()
			}
			mu.Lock()
			attempts = append(attempts, attempt{start: t, outcome: out})
			mu.Unlock()
		}()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	elapsed := now().Sub(start)
	if len(attempts) == 0 {
		return nil, fmt.Errorf("connect sampler: ended before its first attempt: %w", context.Cause(ctx))
	}
	slices.SortFunc(attempts, func(a, b attempt) int { return a.start.Compare(b.start) })
	tl := Timeline(split(attempts))
	tl.IntervalMs, tl.TimeoutMs = float64(every)/1e6, float64(timeout)/1e6
	res := &probe.Result{Kind: probe.KindConnect, Tool: "cnperf", Dst: spec.Target, StartedAt: start,
		DurationS: elapsed.Seconds(), Connects: tl}
	res.Notes = append(res.Notes, fmt.Sprintf("%d connects to %s, one every %v, each bounded by %v", len(attempts), spec.Target, every, timeout))
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// hold makes spec.Count connects, one every interval, keeps the
// connections made open until the last attempt has ended, and counts
// those still open then (the peer may have closed or reset some).
func hold(ctx context.Context, spec probe.Spec, env probe.Env, d net.Dialer, every, timeout time.Duration) (*probe.Result, error) {
	now := env.Clock()
	start := now()
	attempts := make([]attempt, spec.Count)
	conns := make([]net.Conn, spec.Count)
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	made := 0
	for ; made < spec.Count && ctx.Err() == nil; made++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			t := now()
			c, err := d.DialContext(actx, "tcp", spec.Target)
			attempts[i], conns[i] = attempt{start: t, outcome: outcome(err)}, c
		}(made)
		if made < spec.Count-1 {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}
	wg.Wait()
	attempts = attempts[:made]
	held := 0
	checkBy := time.Now().Add(openCheck)
	for _, c := range conns {
		if c != nil {
			_ = c.SetReadDeadline(checkBy)
		}
	}
	var buf [1]byte
	for _, c := range conns {
		if c == nil {
			continue
		}
		var ne net.Error
		if _, err := c.Read(buf[:]); err == nil || errors.As(err, &ne) && ne.Timeout() {
			held++
		}
		_ = c.Close()
	}
	elapsed := now().Sub(start)
	if made == 0 {
		return nil, fmt.Errorf("connect hold: ended before its first attempt: %w", context.Cause(ctx))
	}
	slices.SortFunc(attempts, func(a, b attempt) int { return a.start.Compare(b.start) })
	tl := Timeline(split(attempts))
	tl.IntervalMs, tl.TimeoutMs, tl.Held = float64(every)/1e6, float64(timeout)/1e6, &held
	res := &probe.Result{Kind: probe.KindConnect, Tool: "cnperf", Dst: spec.Target, StartedAt: start,
		DurationS: elapsed.Seconds(), Connects: tl}
	res.Notes = append(res.Notes, fmt.Sprintf("%d connects to %s held open at once, one every %v, each bounded by %v: %d open when the last ended",
		made, spec.Target, every, timeout, held))
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// split returns the attempts' starts and outcomes.
func split(as []attempt) ([]time.Time, []string) {
	ts, os := make([]time.Time, len(as)), make([]string, len(as))
	for i, a := range as {
		ts[i], os[i] = a.start, a.outcome
	}
	return ts, os
}

// outcome names a dial's result.
func outcome(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return probe.ConnectOK
	case errors.Is(err, syscall.ECONNREFUSED):
		return probe.ConnectRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return probe.ConnectTimeout
	}
	return probe.ConnectError
}

// Timeline folds attempts (their starts, in order, and outcomes) into
// runs of one outcome, at most probe.MaxConnectSpans of them.
func Timeline(starts []time.Time, outcomes []string) *probe.ConnectTimeline {
	tl := &probe.ConnectTimeline{Attempts: len(starts), Outcomes: map[string]int{}}
	for i, t := range starts {
		o := outcomes[i]
		tl.Outcomes[o]++
		if tl.Truncated {
			continue
		}
		if n := len(tl.Spans); n > 0 && tl.Spans[n-1].Outcome == o {
			tl.Spans[n-1].Last = t
			tl.Spans[n-1].Attempts++
			continue
		}
		if len(tl.Spans) == probe.MaxConnectSpans {
			tl.Truncated = true
			continue
		}
		tl.Spans = append(tl.Spans, probe.ConnectSpan{Outcome: o, First: t, Last: t, Attempts: 1})
	}
	return tl
}
