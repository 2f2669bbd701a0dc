// Package udp is cnperf's UDP engine: a paced sender (client) and a
// counting receiver (responder). Every datagram carries a sequence number
// and its send time; the receiver reports packets sent, received, lost, out
// of order and duplicated, RFC 3550 jitter, one-way latency (exact when both
// ends share a clock, otherwise corrected by the control connection's
// offset estimate and flagged with its error bound), packets per second and
// a fixed-bin latency histogram.
//
// The sender paces by a token bucket on the monotonic clock, so the average
// rate does not depend on how precisely the thread sleeps; short waits spin
// and longer ones sleep on a locked thread whose timer slack is lowered to
// 1 ns. It sends in batches with UDP GSO (sendmmsg without it); the
// responder receives with recvmmsg and UDP GRO.
package udp

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/udpio"
	"github.com/cnperf/cnperf/internal/stats"
)

// Defaults and bounds.
const (
	DefaultDuration = 10 * time.Second
	DefaultInterval = time.Second
	MinInterval     = 100 * time.Millisecond
	DefaultRateBps  = 1_000_000 // as iperf3
	DefaultSize     = 1400
	// HeaderLen is the cnperf header plus sequence number and send time.
	HeaderLen       = probe.PacketHeaderLen + 16
	MaxSize         = 65000
	DefaultBinWidth = 10 * time.Microsecond
	DefaultBins     = 200
	MaxBins         = 100000
	MaxDuration     = 24 * time.Hour
	drainTimeout    = 10 * time.Second
	// quietAfterStop is how long the receiver waits after the sender's
	// stop for datagrams still on the way (it stops earlier once the line
	// has been quiet for quietGap).
	quietAfterStop = 500 * time.Millisecond
	quietGap       = 50 * time.Millisecond
)

// Prober is the client (sending) side.
type Prober struct{}

// Name returns "udp".
func (Prober) Name() string { return probe.KindUDP }

// Validate checks the spec.
func (Prober) Validate(s probe.Spec) error {
	var errs []error
	if err := s.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	if s.Reverse {
		errs = append(errs, errors.New("reverse: the udp probe sends from this side only; run it from the other end"))
	}
	if s.Streams > 1 {
		errs = append(errs, fmt.Errorf("streams %d: the udp probe sends one flow; run several probes for more", s.Streams))
	}
	if s.Size != 0 && (s.Size < HeaderLen || s.Size > MaxSize) {
		errs = append(errs, fmt.Errorf("size %d: must be %d-%d bytes of UDP payload", s.Size, HeaderLen, MaxSize))
	}
	if s.Interval > 0 && s.Interval.D() < MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v", s.Interval.D(), MinInterval))
	}
	if s.Duration.D() > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %v: at most %v", s.Duration.D(), MaxDuration))
	}
	if s.HistBins > MaxBins {
		errs = append(errs, fmt.Errorf("histogram bins %d: at most %d", s.HistBins, MaxBins))
	}
	return errors.Join(errs...)
}

func size(s probe.Spec) int {
	if s.Size > 0 {
		return s.Size
	}
	return DefaultSize
}

func rateBps(s probe.Spec) uint64 {
	if s.RateBps != nil {
		return *s.RateBps
	}
	return DefaultRateBps
}

// startData and stopData travel on the control connection.
type startData struct {
	OffsetNs int64 `json:"offset_ns"` // responder clock minus client clock
}

type stopData struct {
	Sent      int64   `json:"sent"`
	Bytes     int64   `json:"bytes"`
	DurationS float64 `json:"duration_s"`
}

// recvData is the receiver's side of the result.
type recvData struct {
	Received   int64            `json:"received"`
	Bytes      int64            `json:"bytes"`
	OutOfOrder int64            `json:"out_of_order"`
	Duplicate  int64            `json:"duplicate"`
	JitterMs   float64          `json:"jitter_ms"`
	Latency    probe.Summary    `json:"latency_ms"`
	Histogram  probe.Histogram  `json:"histogram"`
	TOS        *int             `json:"tos,omitempty"`
	TOSMixed   bool             `json:"tos_mixed,omitempty"`
	HostDrops  *int64           `json:"host_drops,omitempty"`
	CPUPct     float64          `json:"cpu_pct"`
	Intervals  []probe.Interval `json:"intervals,omitempty"`
	GRO        bool             `json:"gro"`
}

// Run measures.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	dur := spec.DurationOr(DefaultDuration)
	sz := size(spec)
	rate := rateBps(spec)
	c, err := probe.Dial(ctx, spec, probe.SockOpts{TOS: spec.TOSByte()})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Ctrl.Expect(ctx, probe.MsgReady); err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	d := net.Dialer{Control: probe.SockOpts{TOS: spec.TOSByte()}.Control()}
	if spec.Source != "" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(spec.Source)}
	}
	nc, err := d.DialContext(ctx, "udp", spec.Target)
	if err != nil {
		return nil, fmt.Errorf("udp: open data socket to %s: %w", spec.Target, err)
	}
	uc := nc.(*net.UDPConn)
	defer uc.Close()
	udpio.SetBuffers(uc, 4<<20)
	w, err := udpio.NewWriter(uc)
	if err != nil {
		return nil, err
	}
	res := probe.NewResult(spec, uc.LocalAddr().String(), c.Ctrl.Conn().RemoteAddr().String(), env.Clock()())
	clock := c.Clock
	res.Clock = &clock
	offset := int64(0)
	if !clock.SameClock {
		offset = int64(clock.OffsetMs * 1e6)
	}
	sd, _ := json.Marshal(startData{OffsetNs: offset})
	if err := c.Ctrl.Send(ctx, probe.Message{Type: probe.MsgStart, Data: sd}); err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	// Watch the control connection: a responder that fails or dies ends
	// the test at once.
	ctrlErr := make(chan error, 1)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var wg sync.WaitGroup
	var result probe.Message
	wg.Add(1)
	go func() {
		defer wg.Done()
		m, err := c.Ctrl.RecvNoDeadline(sctx)
		if err == nil && m.Type != probe.MsgResult {
			err = fmt.Errorf("control protocol: want %q message, got %q", probe.MsgResult, m.Type)
		}
		result = m
		if err != nil {
			scancel()
		}
		ctrlErr <- err
	}()
	cpu0 := probe.SampleCPU()
	snd := sender{w: w, size: sz, rate: rate, session: c.Session, env: env, interval: spec.IntervalOr(DefaultInterval)}
	sendErr := snd.run(sctx, dur)
	cpu1 := probe.SampleCPU()
	if sendErr != nil {
		scancel()
		wg.Wait()
		if err := <-ctrlErr; err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("udp: responder failed during the test: %w", err)
		}
		return nil, fmt.Errorf("udp: %w", sendErr)
	}
	rctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	stopB, _ := json.Marshal(stopData{Sent: snd.sent, Bytes: snd.sent * int64(sz), DurationS: snd.elapsed.Seconds()})
	if err := c.Ctrl.Send(rctx, probe.Message{Type: probe.MsgStop, Data: stopB}); err != nil {
		scancel()
		wg.Wait()
		return nil, fmt.Errorf("udp: %w", err)
	}
	select {
	case err := <-ctrlErr:
		if err != nil {
			return nil, fmt.Errorf("udp: waiting for the receiver's figures: %w", err)
		}
	case <-rctx.Done():
		scancel()
		wg.Wait()
		return nil, fmt.Errorf("udp: no figures from the responder within %v of the end", drainTimeout)
	}
	var rd recvData
	if err := json.Unmarshal(result.Data, &rd); err != nil {
		return nil, fmt.Errorf("udp: decode receiver figures: %w", err)
	}
	secs := snd.elapsed.Seconds()
	res.DurationS = secs
	res.Intervals = snd.intervals
	lost := snd.sent - rd.Received
	if lost < 0 {
		lost = 0
	}
	res.Packets = &probe.PacketCounts{Sent: snd.sent, Received: rd.Received, Lost: lost, OutOfOrder: rd.OutOfOrder, Duplicate: rd.Duplicate}
	res.LossPct = probe.Float(stats.LossPct(lost, snd.sent))
	res.Bytes = &probe.SenderReceiver{Sender: float64(snd.sent * int64(sz)), Receiver: float64(rd.Bytes)}
	res.ThroughputBps = &probe.SenderReceiver{Sender: float64(snd.sent*int64(sz)) * 8 / secs, Receiver: float64(rd.Bytes) * 8 / secs}
	res.PPS = probe.Float(float64(rd.Received) / secs)
	res.JitterMs = probe.Float(rd.JitterMs)
	res.CPUPct = &probe.SenderReceiver{Sender: probe.CPUPercent(cpu0, cpu1), Receiver: rd.CPUPct}
	if rd.Received > 0 {
		lat := rd.Latency
		res.LatencyMs = &lat
		h := rd.Histogram
		res.Histogram = &h
	}
	if rd.TOS != nil {
		res.SetDSCPReceived(*rd.TOS)
		if rd.TOSMixed {
			res.Notes = append(res.Notes, "datagrams arrived with different DSCP marks; dscp_received is the first one's")
		}
	} else if rd.Received > 0 {
		res.Notes = append(res.Notes, "the responder's kernel did not report the TOS of arriving datagrams")
	}
	if !clock.SameClock {
		res.Notes = append(res.Notes, fmt.Sprintf("the ends have different clocks: one-way latency is corrected by the estimated offset %.3f ms and is uncertain by ± %.3f ms", clock.OffsetMs, clock.ErrorBoundMs))
	}
	if rd.HostDrops != nil && *rd.HostDrops > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the responder's socket dropped %d datagrams for a full buffer (host loss, not path loss; shared by concurrent sessions)", *rd.HostDrops))
	}
	if !w.GSO {
		res.Notes = append(res.Notes, "UDP GSO unavailable: sent with sendmmsg")
	}
	if !rd.GRO {
		res.Notes = append(res.Notes, "UDP GRO unavailable at the responder: received with recvmmsg")
	}
	return res, nil
}

// sender paces datagrams.
type sender struct {
	w        *udpio.Writer
	size     int
	rate     uint64
	session  probe.SessionID
	env      probe.Env
	interval time.Duration

	sent      int64
	elapsed   time.Duration
	intervals []probe.Interval
}

// batchMax is the most datagrams put in one system call; burstWindow is
// the longest a paced sender lets datagrams accumulate into one batch.
const (
	batchMax    = 64
	burstWindow = 32 * time.Microsecond
)

func (s *sender) run(ctx context.Context, dur time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = probe.LowerTimerSlack()
	sz := s.size
	buf := make([]byte, batchMax*sz)
	for i := 0; i < batchMax; i++ {
		probe.PacketHeader{Type: probe.PacketUDPData, Session: s.session}.Put(buf[i*sz:])
	}
	var pktNs float64
	if s.rate > 0 {
		pktNs = float64(sz) * 8 * 1e9 / float64(s.rate)
	}
	// At high rates, send in bursts of at most burstWindow worth of
	// datagrams: one system call per datagram would cap the rate.
	minBatch := int64(1)
	if pktNs > 0 {
		minBatch = int64(float64(burstWindow) / pktNs)
		minBatch = max(1, min(minBatch, batchMax))
	}
	start := time.Now()
	end := start.Add(dur)
	nextIv := s.interval
	var ivSent int64
	lastIv := time.Duration(0)
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := time.Now()
		el := now.Sub(start)
		if el >= nextIv || !now.Before(end) {
			if el > end.Sub(start) {
				el = end.Sub(start)
			}
			if el-lastIv >= s.interval/10 {
				s.emit(lastIv, el, s.sent-ivSent)
			}
			ivSent, lastIv = s.sent, el
			nextIv += s.interval
		}
		if !now.Before(end) {
			break
		}
		n := batchMax
		if pktNs > 0 {
			due := int64(float64(el)/pktNs) + 1 - s.sent
			if due < minBatch {
				wait := time.Duration(float64(s.sent+minBatch-1)*pktNs) - el
				sleep(wait)
				continue
			}
			if due < int64(n) {
				n = int(due)
			}
		}
		tx := now.UnixNano()
		for i := 0; i < n; i++ {
			b := buf[i*sz:]
			binary.BigEndian.PutUint64(b[probe.PacketHeaderLen:], uint64(s.sent)+uint64(i))
			binary.BigEndian.PutUint64(b[probe.PacketHeaderLen+8:], uint64(tx))
		}
		k, err := s.w.Write(buf, sz, n)
		s.sent += int64(k)
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				continue // the local queue is full: the datagram was not sent
			}
			s.elapsed = time.Since(start)
			return fmt.Errorf("send datagram %d: %w", s.sent, err)
		}
	}
	s.elapsed = time.Since(start)
	if s.elapsed > dur {
		s.elapsed = dur
	}
	return nil
}

func (s *sender) emit(from, to time.Duration, pkts int64) {
	secs := (to - from).Seconds()
	if secs <= 0 {
		return
	}
	b := float64(pkts * int64(s.size))
	iv := probe.Interval{StartS: from.Seconds(), EndS: to.Seconds(), Bytes: b, ThroughputBps: b * 8 / secs, Packets: probe.Int64(pkts)}
	s.intervals = append(s.intervals, iv)
	if s.env.OnInterval != nil {
		s.env.OnInterval(iv)
	}
}

// sleep waits for d: short waits spin (a sleep would overshoot them), longer
// ones sleep in the kernel with this thread's lowered timer slack.
func sleep(d time.Duration) {
	const spinBelow = 20 * time.Microsecond
	if d <= 0 {
		return
	}
	if d < spinBelow {
		until := time.Now().Add(d)
		for time.Now().Before(until) {
		}
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}

// Handler is the responder (receiving) side.
type Handler struct{}

// Kind returns "udp".
func (Handler) Kind() string { return probe.KindUDP }

// receiver is a session's counting state.
type receiver struct {
	mu       sync.Mutex // guards everything below; taken per datagram by the responder's reader
	started  bool
	offsetNs int64
	seq      stats.SeqTracker
	jitter   stats.Jitter
	lat      *stats.Recorder
	bins     *stats.Bins
	bytes    int64
	tos      *int
	tosMixed bool
	drops0   uint32
	drops    uint32
	dropsOK  bool
	lastRx   int64 // ns since the epoch
}

func (r *receiver) add(pkt []byte, _ netip.AddrPort, rx probe.RxInfo) {
	if len(pkt) < HeaderLen {
		return
	}
	seq := binary.BigEndian.Uint64(pkt[probe.PacketHeaderLen:])
	tx := int64(binary.BigEndian.Uint64(pkt[probe.PacketHeaderLen+8:]))
	rxNs := rx.KernelNs
	if rxNs == 0 {
		rxNs = rx.RecvNs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRx = rx.RecvNs
	if rx.DropsOK {
		if !r.dropsOK {
			r.drops0, r.dropsOK = rx.Drops, true
		}
		r.drops = rx.Drops
	}
	if r.seq.Add(seq) {
		return // duplicate: counted, not measured again
	}
	r.bytes += int64(len(pkt))
	r.jitter.Add(tx, rxNs)
	owd := rxNs - tx - r.offsetNs
	r.lat.Record(owd)
	r.bins.Add(float64(owd))
	if rx.TOSOK {
		if r.tos == nil {
			t := rx.TOS
			r.tos = &t
		} else if *r.tos != rx.TOS {
			r.tosMixed = true
		}
	}
}

// Serve runs one session.
func (Handler) Serve(ctx context.Context, s *probe.Session) error {
	spec := s.Spec
	spec.Reverse = false
	if err := (Prober{}).Validate(spec); err != nil {
		return err
	}
	width := DefaultBinWidth
	if spec.HistBinWidth > 0 {
		width = spec.HistBinWidth.D()
	}
	nbins := DefaultBins
	if spec.HistBins > 0 {
		nbins = spec.HistBins
	}
	r := &receiver{lat: stats.NewRecorder(), bins: stats.NewBins(float64(width), nbins)}
	s.HandlePackets(r.add)
	if err := s.Ctrl.Send(ctx, probe.Message{Type: probe.MsgReady}); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, drainTimeout)
	m, err := s.Ctrl.Expect(sctx, probe.MsgStart)
	cancel()
	if err != nil {
		return err
	}
	var sd startData
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &sd); err != nil {
			return fmt.Errorf("udp: bad start message: %w", err)
		}
	}
	r.mu.Lock()
	r.offsetNs = sd.OffsetNs
	r.mu.Unlock()
	cpu0 := probe.SampleCPU()
	wctx, wcancel := context.WithTimeout(ctx, spec.DurationOr(DefaultDuration)+2*drainTimeout)
	m, err = s.Ctrl.Expect(wctx, probe.MsgStop)
	wcancel()
	if err != nil {
		return err
	}
	// Let datagrams still in flight arrive.
	stopAt := time.Now()
	for time.Since(stopAt) < quietAfterStop {
		r.mu.Lock()
		quiet := time.Now().UnixNano()-r.lastRx >= int64(quietGap)
		r.mu.Unlock()
		if quiet {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cpu1 := probe.SampleCPU()
	s.HandlePackets(func([]byte, netip.AddrPort, probe.RxInfo) {})
	r.mu.Lock()
	out := recvData{
		Received: r.seq.Received(), Bytes: r.bytes, OutOfOrder: r.seq.OutOfOrder(), Duplicate: r.seq.Duplicates(),
		JitterMs: r.jitter.Value() / 1e6, Latency: r.lat.Summary(1e-6),
		Histogram: probe.Histogram{BinWidthUs: float64(width) / 1e3, Counts: r.bins.Counts()},
		TOS:       r.tos, TOSMixed: r.tosMixed, CPUPct: probe.CPUPercent(cpu0, cpu1), GRO: s.GRO(),
	}
	if r.dropsOK {
		out.HostDrops = probe.Int64(int64(r.drops - r.drops0))
	}
	r.mu.Unlock()
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, drainTimeout)
	defer rcancel()
	return s.Ctrl.Send(rctx, probe.Message{Type: probe.MsgResult, Data: data})
}
