// Package capacity is the suite that finds, per path, the highest UDP rate
// whose loss at the receiver stays below a threshold (the thesis's
// "capacity"): a search whose next trial depends on the last outcome
// (suite.Follower), then a longer re-test at the rate found.
package capacity

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Options tune the capacity search: the highest UDP rate a path
// carries with receiver-side loss below a threshold (the thesis's
// "capacity").
type Options struct {
	LossThresholdPct float64       // default 0.1
	StartBps         uint64        // first rate tried, default 100 Mbit/s
	MinBps           uint64        // lowest rate tried, default 1 Mbit/s
	MaxBps           uint64        // highest rate tried, default 20 Gbit/s
	Precision        float64       // stop when high/low <= 1+Precision, default 0.05
	MaxTrials        int           // search trials, default 14
	TrialTime        time.Duration // each search trial, default 1 s
	RetestTime       time.Duration // the re-test at the found rate, default 3 s
	Retests          int           // re-tests, each 10 % lower after a failure, default 3
	Size             int           // datagram payload, default 1400
	// Offload is the udp probes' --offload: "auto" by default, since a
	// capacity search measures bytes through the path, which a shaper
	// counts alike whether datagrams travel batched or not, and the
	// batched sender leaves the CPU to the path (see docs/probes.md).
	Offload string
}

func (o Options) withDefaults() Options {
	if o.LossThresholdPct == 0 {
		o.LossThresholdPct = 0.1
	}
	if o.Offload == "" {
		o.Offload = probe.OffloadAuto
	}
	if o.StartBps == 0 {
		o.StartBps = 100e6
	}
	if o.MinBps == 0 {
		o.MinBps = 1e6
	}
	if o.MaxBps == 0 {
		o.MaxBps = 20e9
	}
	if o.Precision == 0 {
		o.Precision = 0.05
	}
	if o.MaxTrials == 0 {
		o.MaxTrials = 14
	}
	if o.TrialTime == 0 {
		o.TrialTime = time.Second
	}
	if o.RetestTime == 0 {
		o.RetestTime = 3 * time.Second
	}
	if o.Retests == 0 {
		o.Retests = 3
	}
	if o.Size == 0 {
		o.Size = 1400
	}
	return o
}

// Validate checks the options (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.LossThresholdPct <= 0 || o.LossThresholdPct >= 100 || math.IsNaN(o.LossThresholdPct) {
		errs = append(errs, fmt.Errorf("loss threshold %g %%: want above 0 and below 100", o.LossThresholdPct))
	}
	if o.MinBps > o.StartBps || o.StartBps > o.MaxBps {
		errs = append(errs, fmt.Errorf("rates: want min %d <= start %d <= max %d bit/s", o.MinBps, o.StartBps, o.MaxBps))
	}
	if o.Precision <= 0.001 || o.Precision > 1 {
		errs = append(errs, fmt.Errorf("precision %g: want 0.001 to 1", o.Precision))
	}
	if o.MaxTrials < 2 || o.MaxTrials > 100 {
		errs = append(errs, fmt.Errorf("max trials %d: want 2-100", o.MaxTrials))
	}
	if o.TrialTime < 200*time.Millisecond || o.RetestTime < 200*time.Millisecond {
		errs = append(errs, fmt.Errorf("trial time %v and re-test time %v: want at least 200ms", o.TrialTime, o.RetestTime))
	}
	if o.Retests < 1 || o.Retests > 10 {
		errs = append(errs, fmt.Errorf("re-tests %d: want 1-10", o.Retests))
	}
	if o.Size < 64 || o.Size > 65000 {
		errs = append(errs, fmt.Errorf("size %d: want 64-65000", o.Size))
	}
	return errors.Join(errs...)
}

// Trial is one UDP run of the search.
type Trial struct {
	RateBps     uint64  `json:"rate_bps"`
	LossPct     float64 `json:"loss_pct"`
	ReceiverBps float64 `json:"receiver_bps"`
	Pass        bool    `json:"pass"`
	Retest      bool    `json:"retest,omitempty"`
}

// Search is the search's state machine: Next says what to run,
// Observe takes what it measured. It touches no network, so the runner
// can drive it and tests can feed it a model path.
type Search struct {
	o        Options
	lo, hi   uint64 // highest passing, lowest failing (0: none yet)
	next     uint64
	trials   []Trial
	retests  int
	retest   bool
	done     bool
	capacity uint64
	retestOK bool
}

// NewSearch starts a search.
func NewSearch(o Options) (*Search, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("capacity options: %w", err)
	}
	o = o.withDefaults()
	return &Search{o: o, next: o.StartBps}, nil
}

// Next returns the next run: its rate and length, and whether it is the
// re-test; ok is false when the search is over.
func (s *Search) Next() (spec probe.Spec, retest bool, ok bool) {
	if s.done {
		return probe.Spec{}, false, false
	}
	rate := s.next
	d := s.o.TrialTime
	if s.retest {
		d = s.o.RetestTime
	}
	return probe.Spec{Kind: probe.KindUDP, Duration: probe.Duration(d), RateBps: &rate, Size: s.o.Size,
		Offload: s.o.Offload, Timeout: probe.Duration(5 * time.Second)}, s.retest, true
}

// Observe records the outcome of the run Next returned: the receiver's
// loss and rate.
func (s *Search) Observe(lossPct, receiverBps float64) {
	if s.done {
		return
	}
	pass := lossPct < s.o.LossThresholdPct && !math.IsNaN(lossPct)
	s.trials = append(s.trials, Trial{RateBps: s.next, LossPct: lossPct, ReceiverBps: receiverBps, Pass: pass, Retest: s.retest})
	if s.retest {
		s.retests++
		if pass {
			s.done, s.capacity, s.retestOK = true, s.next, true
			return
		}
		if s.retests >= s.o.Retests || s.next <= s.o.MinBps {
			s.done, s.capacity = true, s.next
			return
		}
		s.next = max(uint64(float64(s.next)*0.9), s.o.MinBps)
		return
	}
	if pass {
		s.lo = max(s.lo, s.next)
	} else {
		if s.hi == 0 || s.next < s.hi {
			s.hi = s.next
		}
		// An overloaded path delivers about what it carries: nothing much
		// above that rate can pass either.
		if r := receiverBps * (1 + s.o.Precision/2); receiverBps > 0 && r < float64(s.hi) {
			s.hi = max(uint64(r), s.lo+1)
		}
	}
	searchTrials := len(s.trials)
	switch {
	case s.hi == 0 && s.lo >= s.o.MaxBps:
		s.startRetest(s.o.MaxBps) // the path takes everything we may send
	case s.hi == 0:
		s.next = min(s.lo*2, s.o.MaxBps)
	case s.lo == 0 && s.hi <= s.o.MinBps:
		s.done = true // even the lowest rate loses too much
	case s.lo != 0 && float64(s.hi)/float64(s.lo) <= 1+s.o.Precision:
		s.startRetest(s.lo)
	case searchTrials >= s.o.MaxTrials:
		if s.lo == 0 {
			s.done = true
			return
		}
		s.startRetest(s.lo)
	case s.lo == 0:
		// Nothing passed yet: just below what the failed run delivered,
		// or, without that, a big step down.
		if receiverBps > 0 {
			s.next = max(uint64(float64(s.hi)*0.9), s.o.MinBps)
		} else {
			s.next = max(s.hi/8, s.o.MinBps)
		}
	default:
		cand := uint64(math.Sqrt(float64(s.lo) * float64(s.hi)))
		s.next = min(max(cand, s.lo+1), s.hi-1)
	}
}

func (s *Search) startRetest(rate uint64) {
	s.retest, s.next = true, rate
}

// Result is a path's capacity.
type Result struct {
	LossThresholdPct float64 `json:"loss_threshold_pct"`
	// CapacityBps is the highest UDP payload rate found with loss below
	// the threshold (0: none found).
	CapacityBps uint64 `json:"capacity_bps"`
	// RetestLossPct is the loss of the longer re-test at CapacityBps, and
	// RetestPass whether it stayed below the threshold.
	RetestLossPct     *float64 `json:"retest_loss_pct,omitempty"`
	RetestReceiverBps *float64 `json:"retest_receiver_bps,omitempty"`
	RetestPass        bool     `json:"retest_pass"`
	Trials            []Trial  `json:"trials"`
	Errors            []string `json:"errors,omitempty"`
}

// Metrics flattens the row's single figures.
func (r Result) Metrics() map[string]float64 {
	out := map[string]float64{"capacity_bps": float64(r.CapacityBps), "loss_threshold_pct": r.LossThresholdPct}
	if r.RetestLossPct != nil {
		out["retest_loss_pct"] = *r.RetestLossPct
	}
	return out
}

// Row returns the search's outcome so far.
func (s *Search) Row() Result {
	r := Result{LossThresholdPct: s.o.LossThresholdPct, Trials: append([]Trial(nil), s.trials...)}
	if !s.done {
		r.Errors = append(r.Errors, "search did not finish")
	}
	r.CapacityBps = s.capacity
	for i := len(s.trials) - 1; i >= 0; i-- {
		if t := s.trials[i]; t.Retest {
			r.RetestLossPct, r.RetestReceiverBps = probe.Float(t.LossPct), probe.Float(t.ReceiverBps)
			r.RetestPass = t.Pass
			break
		}
	}
	if s.done && s.capacity == 0 {
		r.Errors = append(r.Errors, fmt.Sprintf("no rate down to %s kept loss below %g %%", fmtBps(s.o.MinBps), s.o.LossThresholdPct))
	} else if s.done && !s.retestOK {
		r.Errors = append(r.Errors, fmt.Sprintf("re-test above the %g %% threshold after %d tries", s.o.LossThresholdPct, s.retests))
	}
	return r
}

func fmtBps(v uint64) string { return fmt.Sprintf("%.4g Mbit/s", float64(v)/1e6) }
