package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Defaults and limits.
const (
	DefaultDuration  = probe.DefaultTestDuration
	DefaultInterval  = time.Second
	MinInterval      = 100 * time.Millisecond
	DefaultWriteSize = 128 << 10
	MaxWriteSize     = 16 << 20
	MaxStreams       = 128
	// setupTimeout bounds the session set-up (data connections, start).
	setupTimeout = 10 * time.Second
	// grace bounds the end of a test: draining, final counters, results.
	grace = 5 * time.Second
)

// Control message types of the tcp kind (besides engine.MsgStart, MsgStop,
// MsgResult).
const (
	msgGo       = "go"       // responder → client: data connections accepted, the clock starts
	msgInterval = "interval" // responder → client: one interval sample in Data
)

// config is a validated spec with defaults applied.
type config struct {
	duration, interval time.Duration
	streams, writeSize int
	rateBps            uint64 // 0 = unlimited
	reverse            bool
	tos, window, mss   int
	congestion         string // TCP_CONGESTION of the sending sockets; "" the default
}

func validate(spec probe.Spec) (config, error) {
	var errs []error
	if err := spec.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	if spec.Interval > 0 && spec.Interval.D() < MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v", spec.Interval.D(), MinInterval))
	}
	if spec.Streams > MaxStreams {
		errs = append(errs, fmt.Errorf("streams %d: at most %d", spec.Streams, MaxStreams))
	}
	if spec.Size > MaxWriteSize {
		errs = append(errs, fmt.Errorf("size %d: at most %d bytes per write", spec.Size, MaxWriteSize))
	}
	if spec.MSS != 0 && (spec.MSS < 88 || spec.MSS > 65535) {
		errs = append(errs, fmt.Errorf("mss %d: must be 88-65535", spec.MSS))
	}
	if c := spec.Congestion; c != "" && !validCongestion(c) {
		errs = append(errs, fmt.Errorf("congestion %q: want a congestion control's name (letters, digits, _; at most 15)", c))
	}
	if spec.Duration.D() > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %v: at most 24h", spec.Duration.D()))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	c := config{
		duration:  spec.DurationOr(DefaultDuration),
		interval:  spec.IntervalOr(DefaultInterval),
		streams:   max(spec.Streams, 1),
		writeSize: spec.Size,
		reverse:   spec.Reverse,
		tos:       spec.TOSByte(),
		window:    spec.WindowBytes,
		mss:       spec.MSS,

		congestion: spec.Congestion,
	}
	if c.writeSize == 0 {
		c.writeSize = DefaultWriteSize
	}
	if spec.RateBps != nil {
		c.rateBps = *spec.RateBps
	}
	if c.rateBps > 0 {
		// Keep each write to about 10 ms of the stream's share so pacing
		// stays smooth at low rates.
		per := c.rateBps / uint64(c.streams) / 8 / 100
		if per < 1024 {
			per = 1024
		}
		if uint64(c.writeSize) > per {
			c.writeSize = int(per)
		}
	}
	return c, nil
}

// counter is one stream's byte count, padded to its own cache line so
// parallel streams do not share one.
type counter struct {
	n atomic.Int64
	_ [56]byte
}

// sample is one interval as one side saw it: the receiver fills Bytes, the
// sender Retrans.
type sample struct {
	Index   int     `json:"i"`
	StartS  float64 `json:"start_s"`
	EndS    float64 `json:"end_s"`
	Bytes   *int64  `json:"bytes,omitempty"`
	Retrans *int64  `json:"retrans,omitempty"`
}

// sideResult is one side's figures at the end of the test.
type sideResult struct {
	Bytes    []int64  `json:"bytes"`     // per stream: written (sender) or read (receiver)
	ElapsedS float64  `json:"elapsed_s"` // from start to the last write or the last EOF
	Retrans  []int64  `json:"retrans,omitempty"`
	SRTTus   []uint32 `json:"srtt_us,omitempty"`
	CPUPct   float64  `json:"cpu_pct"`
	// CPUUserPct and CPUSystemPct split CPUPct (nil from an older peer).
	CPUUserPct   *float64 `json:"cpu_user_pct,omitempty"`
	CPUSystemPct *float64 `json:"cpu_system_pct,omitempty"`
	// Congestion is the data connections' TCP_CONGESTION.
	Congestion string `json:"congestion,omitempty"`
	// ArrivedTOS is the TOS byte this side saw arriving on its data
	// connections (nil when unknown).
	ArrivedTOS *int   `json:"arrived_tos,omitempty"`
	Note       string `json:"note,omitempty"`
}

// cpuUse returns the side's CPU split, nil when its report had none.
func (r sideResult) cpuUse() *probe.CPUUse {
	if r.CPUUserPct == nil || r.CPUSystemPct == nil {
		return nil
	}
	return &probe.CPUUse{Pct: r.CPUPct, UserPct: *r.CPUUserPct, SystemPct: *r.CPUSystemPct}
}

// side runs one end's part of a test over its data connections: sending or
// receiving, with interval samples taken on a fixed schedule from t0.
type side struct {
	conns    []net.Conn
	ctr      []counter
	sender   bool
	accepted bool // the connections were accepted (responder side)
	cfg      config
	t0       time.Time
	hard     time.Time // nothing may block past this
	cpu0     engine.CPUSample
	onSample func(sample)

	stop     atomic.Bool   // ask writers to stop early
	doneCh   chan struct{} // closed when every stream finished
	mu       sync.Mutex    // guards firstErr and lastEnd
	firstErr error
	lastEnd  time.Time
	wg       sync.WaitGroup
	tickWG   sync.WaitGroup
}

func newSide(conns []net.Conn, sender bool, cfg config, t0 time.Time, onSample func(sample)) *side {
	return &side{conns: conns, ctr: make([]counter, len(conns)), sender: sender, cfg: cfg,
		t0: t0, hard: t0.Add(cfg.duration + grace), cpu0: engine.SampleCPU(), onSample: onSample,
		doneCh: make(chan struct{})}
}

// start launches one goroutine per stream and the interval ticker.
func (s *side) start() {
	for i, c := range s.conns {
		s.wg.Add(1)
		if s.sender {
			_ = c.SetWriteDeadline(s.t0.Add(s.cfg.duration))
			go s.send(i, c)
		} else {
			_ = c.SetReadDeadline(s.hard)
			go s.receive(i, c)
		}
	}
	go func() {
		s.wg.Wait()
		close(s.doneCh)
	}()
	s.tickWG.Add(1)
	go s.tick()
	if !s.sender {
		w := newLowWater(s.conns, func(i int) int64 { return s.ctr[i].n.Load() })
		s.tickWG.Add(1)
		go func() {
			defer s.tickWG.Done()
			w.run(s.doneCh)
		}()
	}
}

func (s *side) fail(i int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstErr == nil {
		s.firstErr = fmt.Errorf("data stream %d: %w", i, err)
	}
}

func (s *side) ended() {
	s.mu.Lock()
	if now := time.Now(); now.After(s.lastEnd) {
		s.lastEnd = now
	}
	s.mu.Unlock()
}

// abort stops every stream now (peer gone, context cancelled).
func (s *side) abort() {
	s.stop.Store(true)
	past := time.Unix(1, 0)
	for _, c := range s.conns {
		_ = c.SetDeadline(past)
	}
}

func (s *side) send(i int, c net.Conn) {
	defer s.wg.Done()
	defer s.ended()
	buf := make([]byte, s.cfg.writeSize)
	for j := range buf {
		buf[j] = byte(j * 7)
	}
	ctr := &s.ctr[i].n
	var rate float64 // bytes per second for this stream
	if s.cfg.rateBps > 0 {
		rate = float64(s.cfg.rateBps) / 8 / float64(len(s.conns))
	}
	var sent int64
	for !s.stop.Load() {
		n, err := c.Write(buf)
		ctr.Add(int64(n))
		sent += int64(n)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || s.stop.Load() {
				return
			}
			s.fail(i, fmt.Errorf("write: %w", err))
			return
		}
		if rate > 0 {
			due := s.t0.Add(time.Duration(float64(sent) / rate * 1e9))
			if d := time.Until(due); d > 0 {
				end := s.t0.Add(s.cfg.duration)
				if due.After(end) {
					time.Sleep(time.Until(end))
					return
				}
				time.Sleep(d)
			}
		}
	}
}

func (s *side) receive(i int, c net.Conn) {
	defer s.wg.Done()
	buf := make([]byte, 256<<10)
	ctr := &s.ctr[i].n
	for {
		n, err := c.Read(buf)
		ctr.Add(int64(n))
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.ended()
				return
			}
			if s.stop.Load() {
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("sender did not finish within %v of the test's end", grace)
			} else {
				err = fmt.Errorf("read: %w", err)
			}
			s.fail(i, err)
			return
		}
	}
}

// bytes sums the streams' counters.
func (s *side) bytes() int64 {
	var t int64
	for i := range s.ctr {
		t += s.ctr[i].n.Load()
	}
	return t
}

func (s *side) retrans() int64 {
	var t int64
	for _, c := range s.conns {
		if ti, err := readTCPInfo(c); err == nil {
			t += ti.Retrans
		}
	}
	return t
}

// tick takes a sample at t0 + k×interval until the streams end, and a final
// partial one when the tail is at least a tenth of an interval.
func (s *side) tick() {
	defer s.tickWG.Done()
	iv := s.cfg.interval
	var prevBytes, prevRetrans int64
	take := func(k int, start, end time.Time) {
		smp := sample{Index: k, StartS: start.Sub(s.t0).Seconds(), EndS: end.Sub(s.t0).Seconds()}
		if s.sender {
			r := s.retrans()
			d := r - prevRetrans
			prevRetrans = r
			smp.Retrans = &d
		} else {
			b := s.bytes()
			d := b - prevBytes
			prevBytes = b
			smp.Bytes = &d
		}
		s.onSample(smp)
	}
	// tail takes the last, partial interval once the streams ended. A
	// receiver keeps it only when data arrived in it: a sender's last
	// bytes can reach it a while after the test time, and an interval of
	// nothing but that wait is not a measurement.
	tail := func(k int, start time.Time) {
		s.mu.Lock()
		last, failed := s.lastEnd, s.firstErr != nil
		s.mu.Unlock()
		moved := s.sender || s.bytes() > prevBytes
		if !failed && moved && !last.IsZero() && last.Sub(start) >= iv/10 {
			take(k, start, last)
		}
	}
	testEnd := s.t0.Add(s.cfg.duration)
	timer := time.NewTimer(iv)
	defer timer.Stop()
	for k := 0; ; k++ {
		start := s.t0.Add(time.Duration(k) * iv)
		end := start.Add(iv)
		timer.Reset(time.Until(end))
		select {
		case <-timer.C:
			if !start.Before(testEnd) {
				// Past the test time (a receiver waiting for the last
				// bytes under load): no fixed interval any more.
				<-s.doneCh
				tail(k, start)
				return
			}
			take(k, start, end)
		case <-s.doneCh:
			tail(k, start)
			return
		}
	}
}

// wait blocks until every stream finished, or ctx ends (then it aborts the
// streams and waits for them).
func (s *side) wait(ctx context.Context) error {
	select {
	case <-s.doneCh:
	case <-ctx.Done():
		s.abort()
		<-s.doneCh
	}
	s.tickWG.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstErr
}

// finish closes the write side (sender) and returns this side's figures.
func (s *side) finish() sideResult {
	cpu1 := engine.SampleCPU()
	s.mu.Lock()
	last := s.lastEnd
	s.mu.Unlock()
	if last.IsZero() {
		last = time.Now()
	}
	cpu := engine.CPUUseBetween(s.cpu0, cpu1)
	r := sideResult{Bytes: make([]int64, len(s.conns)), ElapsedS: last.Sub(s.t0).Seconds(),
		CPUPct: cpu.Pct, CPUUserPct: probe.Float(cpu.UserPct), CPUSystemPct: probe.Float(cpu.SystemPct)}
	if len(s.conns) > 0 {
		if sc, ok := s.conns[0].(syscall.Conn); ok {
			r.Congestion = engine.ConnCongestion(sc)
		}
	}
	for i := range s.ctr {
		r.Bytes[i] = s.ctr[i].n.Load()
	}
	if s.sender {
		r.Retrans = make([]int64, len(s.conns))
		r.SRTTus = make([]uint32, len(s.conns))
		for i, c := range s.conns {
			if ti, err := readTCPInfo(c); err == nil {
				r.Retrans[i], r.SRTTus[i] = ti.Retrans, ti.SRTTus
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
	}
	for _, c := range s.conns {
		// An IPv4 socket that connected records no arriving TOS (the kernel
		// sets it only when accepting); IPv6 records it on both.
		if !s.accepted && !isV6(c) {
			break
		}
		if tos, ok, err := ArrivedTOS(c); err == nil && ok {
			r.ArrivedTOS = &tos
			break
		}
	}
	return r
}

// merger pairs the receiver's and the sender's samples of each interval and
// hands complete intervals out in order.
type merger struct {
	mu   sync.Mutex // guards everything below
	rx   map[int]sample
	tx   map[int]sample
	next int
	out  []probe.Interval
	on   func(probe.Interval)
}

func newMerger(on func(probe.Interval)) *merger {
	return &merger{rx: map[int]sample{}, tx: map[int]sample{}, on: on}
}

func (m *merger) add(s sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.Bytes != nil {
		m.rx[s.Index] = s
	}
	if s.Retrans != nil {
		m.tx[s.Index] = s
	}
	m.emit(false)
}

// emit hands out interval next when the receiver's half is there and the
// sender's too (or the sender has moved past it, or all is over).
func (m *merger) emit(all bool) {
	for {
		r, ok := m.rx[m.next]
		if !ok {
			if !all {
				return
			}
			// Skip gaps only at the end.
			found := false
			for k := range m.rx {
				if k > m.next {
					found = true
				}
			}
			if !found {
				return
			}
			m.next++
			continue
		}
		t, tok := m.tx[m.next]
		if !tok && !all {
			if _, later := m.tx[m.next+1]; !later {
				return
			}
		}
		iv := probe.Interval{StartS: r.StartS, EndS: r.EndS, Bytes: float64(*r.Bytes)}
		if d := r.EndS - r.StartS; d > 0 {
			iv.ThroughputBps = float64(*r.Bytes) * 8 / d
		}
		if tok {
			v := *t.Retrans
			iv.Retransmits = &v
		}
		m.out = append(m.out, iv)
		if m.on != nil {
			m.on(iv)
		}
		delete(m.rx, m.next)
		delete(m.tx, m.next)
		m.next++
	}
}

// flush hands out everything left and returns all intervals.
func (m *merger) flush() []probe.Interval {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.emit(true)
	return m.out
}

// validCongestion reports whether name can be a congestion control's name
// (the kernel's TCP_CA_NAME_MAX is 16 with the NUL).
func validCongestion(name string) bool {
	if len(name) == 0 || len(name) > 15 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
