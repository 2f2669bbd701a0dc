package udp

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/stats"
)

// receiver accounts the datagrams of one test. add runs once per datagram
// on the receive path and does only constant work; everything else happens
// when a report is taken.
type receiver struct {
	session  engine.SessionID
	offsetNs int64
	latency  bool // record one-way delays
	startNs  int64
	interval time.Duration
	now      func() time.Time

	mu sync.Mutex // guards everything below
	// Sequence accounting.
	seq       stats.SeqTracker
	jit       stats.Jitter
	lat       *stats.Recorder
	bins      *stats.Bins
	bytes     int64
	stray     int64
	firstRxNs int64
	lastRxNs  int64
	tos       int
	tosSeen   bool
	mixedTOS  bool
	kernelTS  bool
	userTS    bool
	drops0    uint32
	drops     uint32
	dropsOK   bool
	// The drop counter of the session's own socket (ownSocket), which
	// counts from zero at its creation, apart from the shared socket's.
	ownDrops   uint32
	ownDropsOK bool
	prevTx     int64
	prevRx     int64
	prevLat    int64
	havePrev   bool
	ivStartNs  int64
	ivBytes    int64
	ivRecv     int64
	ivNextSeq0 uint64 // highest sequence + 1 at the interval's start
	intervals  []probe.Interval
}

func newReceiver(session engine.SessionID, sd startData, spec probe.Spec, now func() time.Time) *receiver {
	width, n := histogram(spec)
	start := now().UnixNano()
	return &receiver{session: session, offsetNs: sd.OffsetNs, latency: sd.Latency,
		startNs: start, ivStartNs: start, interval: spec.IntervalOr(DefaultInterval), now: now,
		lat: stats.NewRecorder(), bins: stats.NewBins(float64(width.Nanoseconds()), n)}
}

// add accounts one datagram with the kernel's view of it; it reports
// whether the datagram was a hello (from a reverse-mode client).
func (r *receiver) add(pkt []byte, tos int, tosOK bool, kernelNs int64, drops uint32, dropsOK bool) (hello bool) {
	if len(pkt) < HeaderLen || pkt[2] != engine.PacketUDPData {
		r.mu.Lock()
		r.stray++
		r.mu.Unlock()
		return false
	}
	if pkt[3]&(FlagHello|FlagCookie) != 0 {
		return true // the reverse test's handshake, not data
	}
	seq := binary.BigEndian.Uint64(pkt[12:20])
	tx := int64(binary.BigEndian.Uint64(pkt[20:28]))
	rx := kernelNs
	r.mu.Lock()
	if rx == 0 {
		rx = r.now().UnixNano()
		r.userTS = true
	} else {
		r.kernelTS = true
	}
	if r.seq.Add(seq) {
		r.mu.Unlock()
		return false // a duplicate counts once, in SeqTracker
	}
	n := int64(len(pkt))
	r.bytes += n
	r.ivBytes += n
	r.ivRecv++
	if r.firstRxNs == 0 {
		r.firstRxNs = rx
	}
	r.lastRxNs = rx
	r.jit.Add(tx, rx)
	// Datagrams of one batch share their send and receive times.
	if !r.havePrev || tx != r.prevTx || rx != r.prevRx {
		r.prevTx, r.prevRx, r.havePrev = tx, rx, true
		r.prevLat = rx - tx - r.offsetNs
	}
	if r.latency {
		r.lat.Record(r.prevLat)
		r.bins.Add(float64(r.prevLat))
	}
	if tosOK {
		if r.tosSeen && tos != r.tos {
			r.mixedTOS = true
		}
		r.tos, r.tosSeen = tos, true
	}
	if dropsOK {
		if !r.dropsOK {
			r.drops0, r.dropsOK = drops, true
		}
		r.drops = drops
	}
	r.mu.Unlock()
	return false
}

// ownSocketDrops records the drop counter (SO_RXQ_OVFL) the session's own
// socket reported with its latest datagram.
func (r *receiver) ownSocketDrops(drops uint32) {
	r.mu.Lock()
	r.ownDrops, r.ownDropsOK = drops, true
	r.mu.Unlock()
}

// tick closes the current interval at now and returns it.
func (r *receiver) tick(now time.Time) probe.Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closeInterval(now.UnixNano())
}

func (r *receiver) closeInterval(endNs int64) probe.Interval {
	var next uint64
	if m, ok := r.seq.MaxSeq(); ok {
		next = m + 1
	}
	expected := int64(next - r.ivNextSeq0)
	lost := max(expected-r.ivRecv, 0)
	secs := float64(endNs-r.ivStartNs) / 1e9
	iv := probe.Interval{
		StartS: float64(r.ivStartNs-r.startNs) / 1e9, EndS: float64(endNs-r.startNs) / 1e9,
		Bytes: float64(r.ivBytes), Packets: probe.Int64(r.ivRecv),
		LossPct:  probe.Float(stats.LossPct(lost, expected)),
		JitterMs: probe.Float(r.jit.Value() / 1e6),
	}
	if secs > 0 {
		iv.ThroughputBps = float64(r.ivBytes) * 8 / secs
	}
	r.intervals = append(r.intervals, iv)
	r.ivStartNs, r.ivBytes, r.ivRecv, r.ivNextSeq0 = endNs, 0, 0, next
	return iv
}

// received returns the distinct datagrams so far.
func (r *receiver) received() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq.Received()
}

// report closes the last (partial) interval at end and returns the totals.
func (r *receiver) report(end time.Time, cpuPct float64, mode string) rxReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	endNs := end.UnixNano()
	if r.ivRecv > 0 || endNs-r.ivStartNs > int64(r.interval)/10 {
		r.closeInterval(endNs)
	}
	rep := rxReport{
		Received: r.seq.Received(), OutOfOrder: r.seq.OutOfOrder(), Duplicate: r.seq.Duplicates(),
		Stray: r.stray, Bytes: r.bytes, DurationNs: endNs - r.startNs,
		JitterMs: r.jit.Value() / 1e6, CPUPct: cpuPct, KernelTS: r.kernelTS && !r.userTS, Mode: mode,
		Intervals: r.intervals, MixedTOS: r.mixedTOS,
	}
	if r.tosSeen {
		rep.TOS = probe.Int(r.tos)
	}
	if r.dropsOK || r.ownDropsOK {
		rep.Drops = probe.Int64(int64(r.drops-r.drops0) + int64(r.ownDrops))
	}
	if r.latency && r.lat.Count() > 0 {
		s := r.lat.Summary(1e-6)
		rep.Latency = &s
		rep.Histogram = &probe.Histogram{BinWidthUs: r.bins.Width() / 1e3, Counts: r.bins.Counts()}
	}
	if r.userTS {
		rep.Notes = append(rep.Notes, "receiver: some datagrams came without a kernel timestamp; their one-way delay uses the time the program read them")
	}
	return rep
}
