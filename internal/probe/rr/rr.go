// Package rr is cnperf's request/response latency engine, like netperf's
// TCP_RR, UDP_RR and TCP_CRR: one transaction in flight at a time, Size
// bytes each way (default 64, at least 40), for Count transactions or for
// the duration (default 10 s). The Prober is the client, the Handler the
// responder side.
//
// Two round-trip times are reported per transaction:
//
//   - rtt_ms, the network's: (client's kernel receive time of the response
//     − client's clock right before the request's write) − (responder's
//     clock right before the reply's write − responder's kernel receive
//     time of the request), as TWAMP and STAMP subtract the reflector's
//     dwell. Kernel receive times come from SO_TIMESTAMPNS (on TCP sockets
//     too, through recvmsg). Each end only subtracts its own clock's
//     readings, so the clocks need not agree. When a kernel timestamp is
//     missing, user-space time after the read stands in and a note says so.
//   - app_rtt_ms, the application's: from right before the write to right
//     after the read returned, wake-ups included. For crr it spans the
//     whole transaction (connect, request, response); rtt_ms then is the
//     request/response exchange on the new connection.
//
// Everything is client-initiated and the responder replies to the source
// address it saw, so it works behind NAT. UDP requests go to the
// responder's shared UDP port with a engine.PacketHeader; a request without
// an answer within Timeout (default 1 s) is lost and counts in loss_pct.
// Over TCP a missing answer within Timeout (default 5 s) fails the test.
// The client sends and receives with blocking system calls outside Go's
// poller and allocates nothing per transaction; with an interval it sleeps
// on a locked OS thread with its timer slack lowered.
//
// dscp_received: over UDP the responder reads each request's TOS
// (IP_RECVTOS) and echoes it in the response; over TCP it reads the TOS its
// kernel recorded for the connection (see package tcp, ArrivedTOS).
//
// rr does not pace by rate: a rate (RateBps) is rejected, 0 with its own
// message. Interval, when set, starts transaction i at i × Interval from
// the first (as ping spaces its echoes), or at the next slot when a slow
// transaction overran its own (missed slots are skipped, not made up back
// to back), sleeping on the locked thread with its timer slack lowered;
// unset, transactions run back to back.
package rr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/stats"
)

// Transports.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
	ProtoCRR = "crr"
)

// Defaults and limits.
const (
	DefaultSize       = 64
	MinSize           = 40
	MaxSizeUDP        = 65000
	MaxSizeTCP        = 1 << 20
	DefaultDuration   = probe.DefaultTestDuration
	DefaultUDPTimeout = time.Second
	DefaultTCPTimeout = 5 * time.Second
	// endTimeout bounds the closing exchange with the responder.
	endTimeout = 5 * time.Second
	// rxStampWait bounds the wait for the kernel's receive time-stamping
	// to take effect (see engine.HoldRxTimestamps).
	rxStampWait = 200 * time.Millisecond
	// TrimmedKeepPct is the share of round trips rtt_trimmed_mean_ms
	// keeps (the lowest), as IETF responsiveness trims its probes.
	TrimmedKeepPct = 95
)

type config struct {
	proto    string
	size     int
	count    int
	duration time.Duration // 0: until count
	timeout  time.Duration
	interval time.Duration // 0: back to back
	tos      int
}

func validate(spec probe.Spec) (config, error) {
	var errs []error
	if err := spec.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	c := config{proto: spec.Proto, size: spec.Size, count: spec.Count, tos: spec.TOSByte(), interval: spec.Interval.D()}
	if c.proto == "" {
		c.proto = ProtoTCP
	}
	maxSize := MaxSizeTCP
	switch c.proto {
	case ProtoTCP, ProtoCRR:
		c.timeout = spec.TimeoutOr(DefaultTCPTimeout)
	case ProtoUDP:
		maxSize = MaxSizeUDP
		c.timeout = spec.TimeoutOr(DefaultUDPTimeout)
	default:
		errs = append(errs, fmt.Errorf("proto %q: want tcp, udp or crr", spec.Proto))
	}
	if c.size == 0 {
		c.size = DefaultSize
	}
	if c.size < MinSize || c.size > maxSize {
		errs = append(errs, fmt.Errorf("size %d: rr needs %d-%d bytes per request", c.size, MinSize, maxSize))
	}
	if spec.RateBps != nil {
		if *spec.RateBps == 0 {
			errs = append(errs, errors.New("rate 0: rr runs one transaction at a time as fast as they complete; it takes no rate (omit --rate)"))
		} else {
			errs = append(errs, fmt.Errorf("rate %d bit/s: rr does not pace transactions; omit --rate", *spec.RateBps))
		}
	}
	if spec.Reverse {
		errs = append(errs, errors.New("reverse: rr is always client-initiated; --reverse does not apply"))
	}
	if spec.Streams > 1 {
		errs = append(errs, fmt.Errorf("streams %d: rr keeps one transaction in flight", spec.Streams))
	}
	if spec.Duration.D() > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %v: at most 24h", spec.Duration.D()))
	}
	if spec.Interval.D() > time.Hour {
		errs = append(errs, fmt.Errorf("interval %v: at most 1h between transactions", spec.Interval.D()))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	switch {
	case spec.Duration > 0:
		c.duration = spec.Duration.D()
	case c.count == 0:
		c.duration = DefaultDuration
	}
	return c, nil
}

// Prober is the client side of the rr probe.
type Prober struct{}

// Name returns "rr".
func (Prober) Name() string { return probe.KindRR }

// Validate rejects specs the engine cannot run.
func (Prober) Validate(spec probe.Spec) error {
	_, err := validate(spec)
	return err
}

// tally is what a client loop measured.
type tally struct {
	rtt, app     *stats.Recorder // ns
	sent, done   int64
	elapsed      time.Duration
	tos          int
	tosOK        bool
	userRx       int64 // responses without a kernel timestamp at the client
	respUserRx   int64 // requests without a kernel timestamp at the responder
	src          string
	stoppedByCtx bool
	progress     *progress // nil: no progress reports
}

func newTally() *tally { return &tally{rtt: stats.NewRecorder(), app: stats.NewRecorder()} }

// record adds one transaction: tw the client's clock right before the
// request's write, t0 the start of the transaction for the application (tw,
// or before the connect for crr), krx the response's kernel receive time (0
// if none), t1 the clock after the read, b the response body.
func (t *tally) record(tw, t0, krx, t1 int64, b body) {
	if krx == 0 {
		krx = t1
		t.userRx++
	}
	if !b.kernelRx() {
		t.respUserRx++
	}
	dwell := b.tx() - b.rx()
	t.rtt.Record(krx - tw - dwell)
	if t.progress != nil {
		t.progress.rtt.Record(krx - tw - dwell)
	}
	t.app.Record(t1 - t0)
	if tos, ok := b.tos(); ok {
		t.tos, t.tosOK = tos, true
	}
	t.done++
}

// endResult is the responder's closing figures.
type endResult struct {
	Served int64 `json:"served"`
	// CPUPct is the responder process's CPU over the session, in percent
	// of one CPU.
	CPUPct *float64 `json:"cpu_pct,omitempty"`
	// SessionSocket is how many UDP transactions the session's own socket
	// answered (the rest came through the responder's shared socket).
	SessionSocket *int64 `json:"session_socket,omitempty"`
	// SharedOnly says why the session could have no UDP socket of its own.
	SharedOnly string `json:"shared_only,omitempty"`
}

// Run measures request/response round trips against spec.Target.
func (Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	cfg, err := validate(spec)
	if err != nil {
		return nil, fmt.Errorf("invalid rr probe: %w", err)
	}
	started := env.Clock()()
	// Transactions spaced by an interval sleep on this locked thread with
	// its timer slack lowered. Back to back, the loop runs unlocked (see
	// yielder).
	if cfg.interval > 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if restore, err := lowerSlack(); err == nil {
			defer restore()
		} else {
			env.Log().Debug("cannot lower timer slack", "err", err)
		}
	}
	// rtt_ms needs kernel receive timestamps from the first transaction.
	defer engine.HoldRxTimestamps(rxStampWait)()
	cl, err := engine.DialWithKey(ctx, spec, engine.SockOpts{TOS: cfg.tos, RecvTstamp: true}, env.TestKey)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := cl.Ctrl.Expect(ctx, engine.MsgReady); err != nil {
		return nil, fmt.Errorf("rr %s to %s: waiting for the responder: %w", cfg.proto, spec.Target, err)
	}
	var t *tally
	cpu0 := engine.SampleCPU()
	switch cfg.proto {
	case ProtoUDP:
		t, err = runUDP(ctx, cfg, spec, cl, env.OnInterval)
	default:
		t, err = runTCP(ctx, cfg, cl, env.OnInterval)
	}
	if err != nil {
		return nil, fmt.Errorf("rr %s to %s: %w", cfg.proto, spec.Target, err)
	}
	clientCPU := engine.CPUPercent(cpu0, engine.SampleCPU())
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	var end endResult
	if err := cl.Ctrl.Send(ectx, engine.Message{Type: engine.MsgStop}); err != nil {
		return nil, fmt.Errorf("rr %s to %s: %w", cfg.proto, spec.Target, err)
	}
	m, err := cl.Ctrl.Expect(ectx, engine.MsgResult)
	if err != nil {
		return nil, fmt.Errorf("rr %s to %s: final counters: %w", cfg.proto, spec.Target, err)
	}
	if err := json.Unmarshal(m.Data, &end); err != nil {
		return nil, fmt.Errorf("rr %s to %s: decode final counters: %w", cfg.proto, spec.Target, err)
	}
	if t.stoppedByCtx && t.done == 0 {
		return nil, fmt.Errorf("rr %s to %s: %w before any transaction completed", cfg.proto, spec.Target, ctx.Err())
	}

	res := &probe.Result{Kind: probe.KindRR, Tool: "cnperf", Src: t.src,
		Dst: cl.Ctrl.Conn().RemoteAddr().String(), DSCP: spec.DSCP(), TOS: cfg.tos,
		StartedAt: started, DurationS: t.elapsed.Seconds()}
	if t.done > 0 {
		r := t.rtt.Summary(1e-6)
		a := t.app.Summary(1e-6)
		res.RTTms, res.AppRTTms = &r, &a
		res.RTTTrimmedMs = probe.Float(t.rtt.TrimmedMean(TrimmedKeepPct, 1e-6))
	}
	// cpu_pct: sender is the client (it sends the requests), receiver the
	// responder's whole process over the session.
	res.CPUPct = &probe.SenderReceiver{Sender: clientCPU}
	if end.CPUPct != nil {
		res.CPUPct.Receiver = *end.CPUPct
	} else {
		res.Notes = append(res.Notes, "the responder reported no cpu_pct (an older responder); cpu_pct.receiver is 0")
	}
	loss := 0.0
	if t.sent > 0 {
		loss = 100 * float64(t.sent-t.done) / float64(t.sent)
	}
	res.LossPct = &loss
	if t.elapsed > 0 {
		res.TransactionsPerS = probe.Float(float64(t.done) / t.elapsed.Seconds())
	}
	if t.tosOK {
		d := t.tos >> 2
		res.DSCPReceived = &d
		res.DSCPSurvived = probe.Bool(d == res.DSCP)
	} else {
		res.Notes = append(res.Notes, "dscp_received unavailable: the responder's kernel reported no TOS")
	}
	if t.userRx > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d of %d responses had no kernel receive timestamp at the client; rtt_ms used the time after the read for them", t.userRx, t.done))
	}
	if t.respUserRx > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d of %d requests had no kernel receive timestamp at the responder; its dwell was measured from after its read", t.respUserRx, t.done))
	}
	if end.SharedOnly != "" {
		res.Notes = append(res.Notes, "the responder answered from its shared UDP socket, which costs it more CPU and each transaction a few µs: "+end.SharedOnly)
	}
	if end.Served < t.done {
		res.Notes = append(res.Notes, fmt.Sprintf("responder counted %d transactions, fewer than the %d answered", end.Served, t.done))
	}
	if t.stoppedByCtx {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// pace waits, on the calling (locked, low-slack) thread, until transaction
// i is due: begin + i × interval, or, when an earlier transaction ran past
// that, the next slot still ahead. Slots a slow transaction overran are
// skipped, not made up back to back: catching up would crowd the
// transactions right after a slow spell (a queue draining) and weigh the
// round trips by how fast they were, not by when they were taken. It
// returns early when ctx ends.
func pace(ctx context.Context, cfg config, begin time.Time, i int64) {
	if cfg.interval <= 0 || i == 0 {
		return
	}
	due := begin.Add(time.Duration(i) * cfg.interval)
	if late := time.Since(due); late > 0 {
		due = due.Add((late/cfg.interval + 1) * cfg.interval)
	}
	for ctx.Err() == nil {
		d := time.Until(due)
		if d <= 0 {
			return
		}
		// Sleep at most 100 ms at a time so cancellation is noticed.
		ts := unix.NsecToTimespec(min(d, 100*time.Millisecond).Nanoseconds())
		_ = unix.Nanosleep(&ts, nil)
	}
}

// loopDone says whether the loop should stop before transaction i.
func loopDone(ctx context.Context, cfg config, i int64, now, end int64) (stop, byCtx bool) {
	if ctx.Err() != nil {
		return true, true
	}
	if cfg.count > 0 && i >= int64(cfg.count) {
		return true, false
	}
	if cfg.duration > 0 && now >= end {
		return true, false
	}
	return false, false
}

// yielder lets Go's scheduler see a transaction loop that never blocks in
// it. A goroutine that keeps its P for 10 ms (the loop's blocking reads are
// syscalls, not scheduler waits) is preempted by the runtime's monitor,
// which then takes the P, hands it to another thread and polls every 20 µs
// for a millisecond: measured here as thousands of monitor wake-ups a
// second, on the two CPUs the round trips need, and a fatter p99. On a
// locked thread each preemption also hands the P to another thread and
// back (two futex wake-ups). So the loops run unlocked and yield every
// yieldPeriod, which on an unlocked goroutine costs a pass through the
// scheduler and keeps the monitor asleep.
//
// By time, not by count: each runtime.Gosched wakes an idle thread of the
// runtime to look for work (a futex wake-up, and on a shared CPU a context
// switch inside someone's round trip). Every 64 transactions that was
// about a thousand a second at each end; every 4 ms it is 250. The time is
// the loop's own latest clock reading (every loop reads its wallClock in
// each transaction), so a tick reads no clock.
type yielder struct {
	clk  *wallClock // nil: never yield
	last int64      // clk's reading at the last yield
}

// yieldPeriod is well under the monitor's 10 ms.
const yieldPeriod = 4 * time.Millisecond

// newYielder yields by clk's readings when on.
func newYielder(on bool, clk *wallClock) yielder {
	if !on {
		return yielder{}
	}
	return yielder{clk: clk, last: clk.last}
}

func (y *yielder) tick() {
	if y.clk == nil {
		return
	}
	// A reading before the last yield's: the wall clock stepped back.
	if d := y.clk.last - y.last; d >= int64(yieldPeriod) || d < 0 {
		y.last = y.clk.last
		runtime.Gosched()
	}
}
