package probe

import (
	"time"

	"github.com/cnperf/cnperf/internal/stats"
)

// Result is the typed outcome of one probe run. Its JSON keys are part of
// cnperf's interface (reports, SLOs and the API name metrics by them): every
// metric's name carries its unit. Kind-specific fields are nil or empty when
// the kind does not measure them, so "0" always means a measured zero.
type Result struct {
	Kind      string    `json:"kind"`
	Tool      string    `json:"tool,omitempty"` // "cnperf" for own engines, else the external tool's name
	Src       string    `json:"src"`
	Dst       string    `json:"dst"`
	DSCP      int       `json:"dscp"`
	TOS       int       `json:"tos"`
	StartedAt time.Time `json:"started_at"`
	DurationS float64   `json:"duration_s"`
	// Request echoes what the run was asked for (Spec.Request), so that a
	// result read alone says which way it measured and at what load.
	Request *Request `json:"request,omitempty"`

	// DSCPReceived is the DSCP the far end saw on arrival (IP_RECVTOS), or
	// nil when it could not be read. DSCPSurvived is true when it equals the
	// DSCP that was sent.
	DSCPReceived *int  `json:"dscp_received,omitempty"`
	DSCPSurvived *bool `json:"dscp_survived,omitempty"`

	// Throughput and transfer (tcp, udp).
	ThroughputBps *SenderReceiver `json:"throughput_bps,omitempty"`
	Bytes         *SenderReceiver `json:"bytes,omitempty"`
	Retransmits   *int64          `json:"retransmits,omitempty"`
	// SRTTms is TCP's smoothed RTT from TCP_INFO at the end of the test, in ms.
	SRTTms *float64        `json:"srtt_ms,omitempty"`
	CPUPct *SenderReceiver `json:"cpu_pct,omitempty"`
	// CPUUserPct and CPUSystemPct split cpu_pct into the processes' user
	// and system time (getrusage), as iperf3's host_user/host_system do.
	CPUUserPct   *SenderReceiver `json:"cpu_user_pct,omitempty"`
	CPUSystemPct *SenderReceiver `json:"cpu_system_pct,omitempty"`
	// TCPCongestion names the congestion-control algorithm of each side's
	// data connections, as TCP_CONGESTION reads it (tcp).
	TCPCongestion *SenderReceiverNames `json:"tcp_congestion,omitempty"`
	// SendMode and RecvMode say how datagrams crossed the system-call
	// boundary (udp): send_mode "gso" (sendmmsg with UDP segmentation
	// offload: the path may carry up to 64 KB batches as one packet until
	// a real NIC segments them), "mmsg" (one datagram per sendmmsg entry)
	// or "plain" (one per call); recv_mode "gro", "mmsg" or "plain".
	SendMode string `json:"send_mode,omitempty"`
	RecvMode string `json:"recv_mode,omitempty"`
	// BurstDatagrams is the most datagrams the sender handed to the kernel
	// in one system call (udp).
	BurstDatagrams *int           `json:"burst_datagrams,omitempty"`
	Intervals      []Interval     `json:"intervals,omitempty"`
	Streams        []StreamResult `json:"streams,omitempty"`

	// Datagram accounting (udp).
	Packets   *PacketCounts `json:"packets,omitempty"`
	LossPct   *float64      `json:"loss_pct,omitempty"`
	JitterMs  *float64      `json:"jitter_ms,omitempty"`
	PPS       *float64      `json:"pps,omitempty"`
	LatencyMs *Summary      `json:"latency_ms,omitempty"` // one-way delay
	Histogram *Histogram    `json:"histogram,omitempty"`
	// Clock tells how far one-way figures can be trusted.
	Clock *ClockInfo `json:"clock,omitempty"`

	// Round trips (rr, ping).
	RTTms    *Summary `json:"rtt_ms,omitempty"`
	AppRTTms *Summary `json:"app_rtt_ms,omitempty"`
	// RTTTrimmedMs is the mean of the lowest 95 % of rtt_ms (rr): the
	// trimmed mean IETF responsiveness turns into round trips per minute.
	RTTTrimmedMs     *float64 `json:"rtt_trimmed_mean_ms,omitempty"`
	TransactionsPerS *float64 `json:"transactions_per_s,omitempty"`

	// Per direction of a two-way test (stamp): Forward is sender to
	// reflector, Reverse the reply's way back.
	Forward *Direction `json:"forward,omitempty"`
	Reverse *Direction `json:"reverse,omitempty"`

	// Path (trace).
	Hops []Hop `json:"hops,omitempty"`

	// WireDSCP is what a wire watch saw of its flow on the node's
	// underlay (wire).
	WireDSCP *WireDSCP `json:"wire_dscp,omitempty"`

	// Queue is what a queue watch saw of its node's queues (queue).
	Queue *QueueWatch `json:"queue,omitempty"`

	// Connects is what a connect sampler saw (connect).
	Connects *ConnectTimeline `json:"connects,omitempty"`

	// Notes say how the figures were obtained when that matters to reading
	// them (a fallback used, a kernel feature missing, a clock caveat).
	Notes []string `json:"notes,omitempty"`
	// Raw is an external tool's output, kept beside the parsed figures.
	Raw string `json:"raw,omitempty"`
}

// Request is what a probe run was asked for, as opposed to what it
// measured. A field the spec left unset (the kind's default applies) is
// absent, except direction, streams and dscp, which always read.
type Request struct {
	// Direction is "forward" (this side sends to the peer) or "reverse"
	// (the peer sends, this side receives: -R).
	Direction string `json:"direction"`
	// Streams is the number of parallel streams (at least 1).
	Streams int `json:"streams"`
	// RateBps is the total target rate over all streams in bits/s; 0 is
	// as fast as the path allows.
	RateBps *uint64 `json:"rate_bps,omitempty"`
	// Size is the bytes per datagram, write, request or echo.
	Size      int     `json:"size,omitempty"`
	DurationS float64 `json:"duration_s,omitempty"`
	DSCP      int     `json:"dscp"`
	TOS       *int    `json:"tos,omitempty"`
	// Count, IntervalS and Proto bound and shape rr, ping and stamp runs
	// (IntervalS is the report interval for tcp and udp).
	Count       int     `json:"count,omitempty"`
	IntervalS   float64 `json:"interval_s,omitempty"`
	Proto       string  `json:"proto,omitempty"`
	WindowBytes int     `json:"window_bytes,omitempty"`
	MSS         int     `json:"mss,omitempty"`
}

// Directions of Request.Direction.
const (
	DirectionForward = "forward"
	DirectionReverse = "reverse"
)

// SenderReceiver is a figure measured at both ends.
type SenderReceiver struct {
	Sender   float64 `json:"sender"`
	Receiver float64 `json:"receiver"`
}

// SenderReceiverNames is a name on each side of a test.
type SenderReceiverNames struct {
	Sender   string `json:"sender,omitempty"`
	Receiver string `json:"receiver,omitempty"`
}

// Interval is one interval report.
type Interval struct {
	StartS        float64 `json:"start_s"`
	EndS          float64 `json:"end_s"`
	Bytes         float64 `json:"bytes"`
	ThroughputBps float64 `json:"throughput_bps"`
	// Retransmits in this interval (tcp sender), packets and loss (udp).
	Retransmits *int64   `json:"retransmits,omitempty"`
	Packets     *int64   `json:"packets,omitempty"`
	LossPct     *float64 `json:"loss_pct,omitempty"`
	JitterMs    *float64 `json:"jitter_ms,omitempty"`
	// Transactions completed in this interval, their rate and the median
	// and 99th percentile of their round trips (rr).
	Transactions     *int64   `json:"transactions,omitempty"`
	TransactionsPerS *float64 `json:"transactions_per_s,omitempty"`
	RTTP50ms         *float64 `json:"rtt_p50_ms,omitempty"`
	RTTP99ms         *float64 `json:"rtt_p99_ms,omitempty"`
}

// StreamResult is one parallel stream's share.
type StreamResult struct {
	ID            int            `json:"id"`
	ThroughputBps SenderReceiver `json:"throughput_bps"`
	Bytes         SenderReceiver `json:"bytes"`
	Retransmits   *int64         `json:"retransmits,omitempty"`
	SRTTms        *float64       `json:"srtt_ms,omitempty"`
}

// PacketCounts is datagram accounting at the receiver.
type PacketCounts struct {
	Sent       int64 `json:"sent"`
	Received   int64 `json:"received"`
	Lost       int64 `json:"lost"`
	OutOfOrder int64 `json:"out_of_order"`
	Duplicate  int64 `json:"duplicate"`
	// TooBig counts sends the kernel refused as larger than the
	// interface's or the learnt path MTU (ping with dont_fragment).
	TooBig int64 `json:"too_big,omitempty"`
}

// Summary is a distribution of values in one unit (the field's name says
// which). It is owned by package stats, which computes it; the alias keeps
// the probes' code as it was.
type Summary = stats.Summary

// Histogram counts values in fixed-width bins starting at zero; the last
// bin also holds everything beyond it.
type Histogram struct {
	BinWidthUs float64 `json:"bin_width_us"`
	Counts     []int64 `json:"counts"`
}

// ClockInfo says how one-way delays were measured.
type ClockInfo struct {
	// SameClock is true when both ends read the same kernel clock (same boot
	// id): one-way delays are then exact.
	SameClock bool `json:"same_clock"`
	// OffsetMs is the estimated offset of the far end's clock (far - near),
	// and ErrorBoundMs half the control connection's best RTT: the true
	// offset lies within OffsetMs ± ErrorBoundMs.
	OffsetMs     float64 `json:"offset_ms"`
	ErrorBoundMs float64 `json:"error_bound_ms"`
}

// Direction is what one direction of a two-way test saw. A field is nil
// when it could not be measured (the notes say why).
type Direction struct {
	// DelayMs is the one-way delay (T2 − T1 forward, T4 − T3 reverse):
	// it reads two clocks, so it is uncertain by ± ErrorBoundMs, the sum of
	// both ends' Error Estimates.
	DelayMs      *Summary `json:"delay_ms,omitempty"`
	ErrorBoundMs *float64 `json:"error_bound_ms,omitempty"`
	// JitterMs is the RFC 3550 jitter of the one-way delay (clock offsets
	// cancel out).
	JitterMs *float64 `json:"jitter_ms,omitempty"`
	Lost     *int64   `json:"lost,omitempty"`
	LossPct  *float64 `json:"loss_pct,omitempty"`
	// DSCPReceived is the DSCP packets arrived with at this direction's
	// far end; DSCPSurvived says whether it is the one asked for.
	DSCPReceived *int  `json:"dscp_received,omitempty"`
	DSCPSurvived *bool `json:"dscp_survived,omitempty"`
}

// Hop is one traceroute hop.
type Hop struct {
	TTL   int       `json:"ttl"`
	Addr  string    `json:"addr,omitempty"` // empty when no reply came
	RTTms []float64 `json:"rtt_ms"`
	// Reached is true for the hop that is the destination.
	Reached bool `json:"reached,omitempty"`
	// DSCPSeen is the DSCP in the IP header this hop's ICMP error quotes:
	// the mark as the probe arrived there. Absent when no error was read
	// with its quote (a quote too short, an echo reply, no raw socket).
	DSCPSeen *int `json:"dscp_seen,omitempty"`
}

// Float returns a pointer to v, for the optional fields of Result.
func Float(v float64) *float64 { return &v }

// Int64 returns a pointer to v.
func Int64(v int64) *int64 { return &v }

// Int returns a pointer to v.
func Int(v int) *int { return &v }

// Bool returns a pointer to v.
func Bool(v bool) *bool { return &v }

// QueueWatch is what a queue watch sampled on a node: the backlog of each
// link's root qdisc, and the node's counters of losses to full queues over
// the watch.
type QueueWatch struct {
	// Toward is the link the node's route to the watch's target leaves by.
	Toward     string  `json:"toward"`
	Samples    int     `json:"samples"`
	IntervalMs float64 `json:"interval_ms"`
	// Links are the links whose root qdisc held a backlog or dropped
	// during the watch, and Toward, by name.
	Links []LinkQueue `json:"links"`
	// Deltas over the watch: TCP segments retransmitted and UDP datagrams
	// dropped for a full receive buffer (/proc/net/snmp, the node's
	// namespace), and packets the receive backlog dropped and times the
	// receive softirq was squeezed (/proc/net/softnet_stat, the host's).
	TCPRetransSegs  *int64 `json:"tcp_retrans_segs,omitempty"`
	UDPRcvbufErrors *int64 `json:"udp_rcvbuf_errors,omitempty"`
	SoftnetDropped  *int64 `json:"softnet_dropped,omitempty"`
	SoftnetSqueezed *int64 `json:"softnet_squeezed,omitempty"`
}

// LinkQueue is one link's root qdisc over a watch.
type LinkQueue struct {
	Link             string  `json:"link"`
	MeanBacklogBytes float64 `json:"mean_backlog_bytes"`
	// P50BacklogBytes is the median sample, within about 2 % (nil from
	// an agent before it).
	P50BacklogBytes *float64 `json:"p50_backlog_bytes,omitempty"`
	MaxBacklogBytes uint64   `json:"max_backlog_bytes"`
	// BusyPct is the share of samples with a backlog.
	BusyPct float64 `json:"busy_pct"`
	Drops   uint64  `json:"drops"`
}

// CPUUse is one side's CPU use over a test, in percent of one CPU: the
// process's user and system time over the wall time (iperf3's
// cpu_util_user and cpu_util_system); Pct is their sum.
type CPUUse struct {
	Pct, UserPct, SystemPct float64
}

// SetCPU fills r's cpu_pct and, when both sides' split is known, its
// cpu_user_pct and cpu_system_pct, from the sender's and the receiver's
// CPU use. A side's split is nil when its peer did not report one (an
// older responder).
func (r *Result) SetCPU(sender, receiver float64, senderSplit, receiverSplit *CPUUse) {
	r.CPUPct = &SenderReceiver{Sender: sender, Receiver: receiver}
	if senderSplit == nil || receiverSplit == nil {
		return
	}
	r.CPUUserPct = &SenderReceiver{Sender: senderSplit.UserPct, Receiver: receiverSplit.UserPct}
	r.CPUSystemPct = &SenderReceiver{Sender: senderSplit.SystemPct, Receiver: receiverSplit.SystemPct}
}

// Outcomes of a connect attempt (ConnectSpan.Outcome).
const (
	ConnectOK      = "ok"      // the handshake completed
	ConnectRefused = "refused" // a reset answered the SYN
	ConnectTimeout = "timeout" // no answer within the timeout
	ConnectError   = "error"   // any other failure
)

// ConnectTimeline is what a connect sampler saw: how many attempts had
// each outcome, and the runs of attempts with one outcome in the order
// they started, each with the start times of its first and last attempt.
type ConnectTimeline struct {
	Attempts   int            `json:"attempts"`
	Outcomes   map[string]int `json:"outcomes"`
	IntervalMs float64        `json:"interval_ms"`
	TimeoutMs  float64        `json:"timeout_ms"`
	Spans      []ConnectSpan  `json:"spans"`
	// Truncated says the spans stop early (MaxConnectSpans).
	Truncated bool `json:"truncated,omitempty"`
	// Held is, when the connections were held (Spec.Count), how many
	// were open at once after the last attempt ended.
	Held *int `json:"held,omitempty"`
}

// MaxConnectSpans bounds ConnectTimeline.Spans.
const MaxConnectSpans = 1000

// ConnectSpan is a run of consecutive attempts with one outcome.
type ConnectSpan struct {
	Outcome  string    `json:"outcome"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Attempts int       `json:"attempts"`
}

// FirstAfter returns the start of the first attempt at or after t whose
// outcome is ok (want true) or not ok (want false), and whether there
// was one.
func (c *ConnectTimeline) FirstAfter(t time.Time, want bool) (time.Time, bool) {
	for _, s := range c.Spans {
		if (s.Outcome == ConnectOK) != want || s.Last.Before(t) {
			continue
		}
		if s.First.Before(t) {
			// The run was under way at t: its attempts are spaced evenly,
			// so the first at or after t is within an interval of t.
			return t, true
		}
		return s.First, true
	}
	return time.Time{}, false
}

// LastBefore returns the outcome of the last attempt started before t,
// or "" when none was.
func (c *ConnectTimeline) LastBefore(t time.Time) string {
	out := ""
	for _, s := range c.Spans {
		if !s.First.Before(t) {
			break
		}
		out = s.Outcome
	}
	return out
}
