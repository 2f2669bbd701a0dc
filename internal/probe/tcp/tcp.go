// Package tcp is cnperf's TCP throughput engine, client (Prober) and
// responder side (Handler): N parallel streams one way or the other
// (--reverse), interval reports from 100 ms up, bytes and throughput at
// both ends, retransmits and smoothed RTT from TCP_INFO, and each end's CPU
// use (process user+sys over wall time, as iperf3 reports it). The DSCP is
// set before connect, so the SYN carries it, and the receiving end reports
// the TOS the handshake arrived with.
package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Defaults and bounds.
const (
	DefaultDuration = 10 * time.Second
	DefaultInterval = time.Second
	MinInterval     = 100 * time.Millisecond
	DefaultSize     = 128 << 10 // bytes per write, as iperf3
	MaxStreams      = 128
	MaxDuration     = 24 * time.Hour
	// drainTimeout bounds the wait for the far end after the test time.
	drainTimeout = 10 * time.Second
)

// Prober is the client side.
type Prober struct{}

// Name returns "tcp".
func (Prober) Name() string { return probe.KindTCP }

// Validate checks the spec.
func (Prober) Validate(s probe.Spec) error {
	var errs []error
	if err := s.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	if s.Interval > 0 && s.Interval.D() < MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v", s.Interval.D(), MinInterval))
	}
	if s.Streams > MaxStreams {
		errs = append(errs, fmt.Errorf("streams %d: at most %d", s.Streams, MaxStreams))
	}
	if s.Duration.D() > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %v: at most %v", s.Duration.D(), MaxDuration))
	}
	if s.Size > 16<<20 {
		errs = append(errs, fmt.Errorf("size %d: at most 16 MiB per write", s.Size))
	}
	if s.MSS != 0 && (s.MSS < 88 || s.MSS > 65535) {
		errs = append(errs, fmt.Errorf("mss %d: must be 88-65535", s.MSS))
	}
	return errors.Join(errs...)
}

// startMsg and sideResult travel on the control connection.
type sideResult struct {
	Bytes       []int64   `json:"bytes"` // per stream
	DurationS   float64   `json:"duration_s"`
	CPUPct      float64   `json:"cpu_pct"`
	Retransmits []int64   `json:"retransmits,omitempty"`
	SRTTms      []float64 `json:"srtt_ms,omitempty"`
	TOS         *int      `json:"tos,omitempty"` // TOS the receiver saw on the handshake
}

func streams(s probe.Spec) int {
	if s.Streams > 0 {
		return s.Streams
	}
	return 1
}

func size(s probe.Spec) int {
	if s.Size > 0 {
		return s.Size
	}
	return DefaultSize
}

func sockOpts(s probe.Spec) probe.SockOpts {
	return probe.SockOpts{TOS: s.TOSByte(), WindowBytes: s.WindowBytes, MSS: s.MSS}
}

// Run measures.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	dur := spec.DurationOr(DefaultDuration)
	n := streams(spec)
	c, err := probe.Dial(ctx, spec, sockOpts(spec))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Ctrl.Expect(ctx, probe.MsgReady); err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, dc := range conns {
			dc.Close()
		}
	}()
	for i := 0; i < n; i++ {
		dc, err := c.DialData(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("tcp: %w", err)
		}
		conns = append(conns, dc)
	}
	res := probe.NewResult(spec, c.LocalAddr().String(), c.Ctrl.Conn().RemoteAddr().String(), env.Clock()())
	if err := c.Ctrl.Send(ctx, probe.Message{Type: probe.MsgStart}); err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	counters := make([]atomic.Int64, n)
	cpu0 := probe.SampleCPU()
	start := time.Now()
	ivs := newIntervals(spec.IntervalOr(DefaultInterval), counters, conns, !spec.Reverse, env)
	var local sideResult
	var runErr error
	if spec.Reverse {
		runErr = receive(ctx, conns, counters, dur+drainTimeout, ivs)
	} else {
		runErr = send(ctx, conns, counters, size(spec), spec.RateBps, start.Add(dur), ivs)
	}
	elapsed := time.Since(start)
	ivs.stop(elapsed)
	cpu1 := probe.SampleCPU()
	local.DurationS = elapsed.Seconds()
	local.CPUPct = probe.CPUPercent(cpu0, cpu1)
	for i := range counters {
		local.Bytes = append(local.Bytes, counters[i].Load())
	}
	for _, dc := range conns {
		if ti, ok := probe.ConnTCPInfo(dc); ok {
			local.Retransmits = append(local.Retransmits, ti.Retransmits)
			local.SRTTms = append(local.SRTTms, ti.SRTTms)
		}
	}
	if spec.Reverse {
		if tos, ok := probe.ConnTOS(conns[0]); ok {
			local.TOS = &tos
		}
	}
	if runErr != nil {
		return nil, fmt.Errorf("tcp: %w", firstErr(ctx, c, runErr))
	}
	if !spec.Reverse {
		for _, dc := range conns {
			if tc, ok := dc.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	if err := c.Ctrl.Send(rctx, probe.Message{Type: probe.MsgStop}); err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	m, err := c.Ctrl.Expect(rctx, probe.MsgResult)
	if err != nil {
		return nil, fmt.Errorf("tcp: waiting for the responder's figures: %w", err)
	}
	var remote sideResult
	if err := json.Unmarshal(m.Data, &remote); err != nil {
		return nil, fmt.Errorf("tcp: decode responder figures: %w", err)
	}
	if len(remote.Bytes) != n {
		return nil, fmt.Errorf("tcp: responder reported %d streams, want %d", len(remote.Bytes), n)
	}
	sender, receiver := local, remote
	if spec.Reverse {
		sender, receiver = remote, local
	}
	fill(res, sender, receiver, n)
	res.DurationS = elapsed.Seconds()
	res.Intervals = ivs.list
	return res, nil
}

// firstErr explains a data-path failure: the responder's own message when
// it sent one, else the data error.
func firstErr(ctx context.Context, c *probe.Client, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return fmt.Errorf("data connection failed (responder gone or reset?): %w", err)
}

func fill(res *probe.Result, sender, receiver sideResult, n int) {
	var sb, rb, retr int64
	res.Streams = make([]probe.StreamResult, n)
	for i := 0; i < n; i++ {
		sr := &res.Streams[i]
		sr.ID = i
		sr.Bytes = probe.SenderReceiver{Sender: float64(sender.Bytes[i]), Receiver: float64(receiver.Bytes[i])}
		sr.ThroughputBps = probe.SenderReceiver{Sender: rate(sender.Bytes[i], sender.DurationS), Receiver: rate(receiver.Bytes[i], receiver.DurationS)}
		if i < len(sender.Retransmits) {
			sr.Retransmits = probe.Int64(sender.Retransmits[i])
			retr += sender.Retransmits[i]
		}
		if i < len(sender.SRTTms) {
			sr.SRTTms = probe.Float(sender.SRTTms[i])
		}
		sb += sender.Bytes[i]
		rb += receiver.Bytes[i]
	}
	res.Bytes = &probe.SenderReceiver{Sender: float64(sb), Receiver: float64(rb)}
	res.ThroughputBps = &probe.SenderReceiver{Sender: rate(sb, sender.DurationS), Receiver: rate(rb, receiver.DurationS)}
	res.Retransmits = probe.Int64(retr)
	if len(sender.SRTTms) > 0 {
		var s float64
		for _, v := range sender.SRTTms {
			s += v
		}
		res.SRTTms = probe.Float(s / float64(len(sender.SRTTms)))
	}
	res.CPUPct = &probe.SenderReceiver{Sender: sender.CPUPct, Receiver: receiver.CPUPct}
	if receiver.TOS != nil {
		res.SetDSCPReceived(*receiver.TOS)
	} else {
		res.Notes = append(res.Notes, "the receiver's kernel did not report the TOS of arriving segments")
	}
}

func rate(bytes int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(bytes) * 8 / secs
}

// send writes on every connection until the deadline, optionally paced to
// rateBps in total.
func send(ctx context.Context, conns []net.Conn, counters []atomic.Int64, size int, rateBps *uint64, until time.Time, ivs *intervals) error {
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	perStream := 0.0
	if rateBps != nil && *rateBps > 0 {
		perStream = float64(*rateBps) / float64(len(conns))
	}
	for i, dc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(ctx, func() { _ = dc.SetWriteDeadline(time.Unix(1, 0)) })
			defer stop()
			_ = dc.SetWriteDeadline(until.Add(drainTimeout))
			start := time.Now()
			var sent int64
			for time.Now().Before(until) {
				if perStream > 0 {
					due := start.Add(time.Duration(float64(sent) * 8 / perStream * 1e9))
					if w := time.Until(due); w > 0 {
						if due.After(until) {
							return
						}
						time.Sleep(w)
					}
				}
				k, err := dc.Write(buf)
				sent += int64(k)
				counters[i].Add(int64(k))
				if err != nil {
					errs[i] = fmt.Errorf("stream %d: write: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// receive reads every connection until its EOF or the bound.
func receive(ctx context.Context, conns []net.Conn, counters []atomic.Int64, bound time.Duration, ivs *intervals) error {
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	deadline := time.Now().Add(bound)
	for i, dc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(ctx, func() { _ = dc.SetReadDeadline(time.Unix(1, 0)) })
			defer stop()
			_ = dc.SetReadDeadline(deadline)
			buf := make([]byte, 256<<10)
			for {
				k, err := dc.Read(buf)
				counters[i].Add(int64(k))
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					errs[i] = fmt.Errorf("stream %d: read: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// intervals samples the byte counters every period.
type intervals struct {
	period   time.Duration
	counters []atomic.Int64
	conns    []net.Conn
	sender   bool
	env      probe.Env
	start    time.Time
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex // guards list, lastBytes, lastAt, lastRetr
	list     []probe.Interval
	lastB    int64
	lastAt   time.Duration
	lastRetr int64
}

func newIntervals(period time.Duration, counters []atomic.Int64, conns []net.Conn, sender bool, env probe.Env) *intervals {
	iv := &intervals{period: period, counters: counters, conns: conns, sender: sender, env: env, start: time.Now(), done: make(chan struct{})}
	iv.wg.Add(1)
	go func() {
		defer iv.wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-iv.done:
				return
			case <-t.C:
				iv.sample(time.Since(iv.start))
			}
		}
	}()
	return iv
}

func (iv *intervals) sample(at time.Duration) {
	iv.mu.Lock()
	var b int64
	for i := range iv.counters {
		b += iv.counters[i].Load()
	}
	secs := (at - iv.lastAt).Seconds()
	if secs <= 0.001 {
		iv.mu.Unlock()
		return
	}
	x := probe.Interval{StartS: iv.lastAt.Seconds(), EndS: at.Seconds(), Bytes: float64(b - iv.lastB), ThroughputBps: float64(b-iv.lastB) * 8 / secs}
	if iv.sender {
		var retr int64
		ok := false
		for _, c := range iv.conns {
			if ti, got := probe.ConnTCPInfo(c); got {
				retr += ti.Retransmits
				ok = true
			}
		}
		if ok {
			x.Retransmits = probe.Int64(retr - iv.lastRetr)
			iv.lastRetr = retr
		}
	}
	iv.lastB, iv.lastAt = b, at
	iv.list = append(iv.list, x)
	iv.mu.Unlock()
	if iv.env.OnInterval != nil {
		iv.env.OnInterval(x)
	}
}

// stop ends sampling; a last partial interval is kept when it is at least
// a tenth of a period long.
func (iv *intervals) stop(at time.Duration) {
	close(iv.done)
	iv.wg.Wait()
	iv.mu.Lock()
	partial := at-iv.lastAt >= iv.period/10
	iv.mu.Unlock()
	if partial {
		iv.sample(at)
	}
}

// Handler is the responder side.
type Handler struct{}

// Kind returns "tcp".
func (Handler) Kind() string { return probe.KindTCP }

// Serve runs one session.
func (Handler) Serve(ctx context.Context, s *probe.Session) error {
	spec := s.Spec
	if err := (Prober{}).Validate(spec); err != nil {
		return err
	}
	n := streams(spec)
	dur := spec.DurationOr(DefaultDuration)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.Ctrl.Send(ctx, probe.Message{Type: probe.MsgReady}); err != nil {
		return err
	}
	conns := make([]net.Conn, n) // by stream index
	defer func() {
		for _, dc := range conns {
			if dc != nil {
				dc.Close()
			}
		}
	}()
	actx, acancel := context.WithTimeout(ctx, drainTimeout)
	for i := 0; i < n; i++ {
		dc, err := s.AcceptData(actx)
		if err != nil {
			acancel()
			return fmt.Errorf("tcp: %w", err)
		}
		if dc.Stream < 0 || dc.Stream >= n || conns[dc.Stream] != nil {
			dc.Close()
			acancel()
			return fmt.Errorf("tcp: unexpected data connection for stream %d of %d", dc.Stream, n)
		}
		_ = probe.ApplyConn(dc.Conn, sockOpts(spec))
		conns[dc.Stream] = dc.Conn
	}
	if _, err := s.Ctrl.Expect(actx, probe.MsgStart); err != nil {
		acancel()
		return err
	}
	acancel()
	// If the client goes away, the control connection ends: stop at once.
	ctrlErr := make(chan error, 1)
	counters := make([]atomic.Int64, n)
	cpu0 := probe.SampleCPU()
	start := time.Now()
	var runErr error
	if spec.Reverse {
		runErr = send(ctx, conns, counters, size(spec), spec.RateBps, start.Add(dur), nil)
		for _, dc := range conns {
			if tc, ok := dc.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
	} else {
		go func() {
			_, err := s.Ctrl.RecvNoDeadline(ctx)
			ctrlErr <- err
		}()
		runErr = receive(ctx, conns, counters, dur+2*drainTimeout, nil)
	}
	elapsed := time.Since(start)
	cpu1 := probe.SampleCPU()
	out := sideResult{DurationS: elapsed.Seconds(), CPUPct: probe.CPUPercent(cpu0, cpu1)}
	for i := range counters {
		out.Bytes = append(out.Bytes, counters[i].Load())
	}
	for _, dc := range conns {
		if ti, ok := probe.ConnTCPInfo(dc); ok {
			out.Retransmits = append(out.Retransmits, ti.Retransmits)
			out.SRTTms = append(out.SRTTms, ti.SRTTms)
		}
	}
	if !spec.Reverse {
		if tos, ok := probe.ConnTOS(conns[0]); ok {
			out.TOS = &tos
		}
	}
	if runErr != nil {
		return runErr
	}
	rctx, rcancel := context.WithTimeout(ctx, drainTimeout)
	defer rcancel()
	if spec.Reverse {
		if _, err := s.Ctrl.Expect(rctx, probe.MsgStop); err != nil {
			return err
		}
	} else {
		select {
		case err := <-ctrlErr:
			if err != nil {
				return err
			}
		case <-rctx.Done():
			return fmt.Errorf("tcp: client sent no stop: %w", rctx.Err())
		}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return s.Ctrl.Send(rctx, probe.Message{Type: probe.MsgResult, Data: data})
}
