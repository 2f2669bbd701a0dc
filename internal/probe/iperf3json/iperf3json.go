// Package iperf3json is the document `iperf3 --json` writes, typed once:
// the fields cnperf reads from the real iperf3 (internal/probe/external)
// and writes for `cnperf report --format iperf3` (internal/report), under
// iperf3's own names and in iperf3's order. It is data only.
package iperf3json

// Doc is one iperf3 --json document (iperf 3.12's layout).
type Doc struct {
	Start     Start      `json:"start"`
	Intervals []Interval `json:"intervals"`
	End       End        `json:"end"`
	Error     string     `json:"error,omitempty"`
	// ExtraData is iperf3's --extra-data field; cnperf puts the run,
	// connection, backend and repetition there.
	ExtraData string `json:"extra_data,omitempty"`
}

// Start is the document's start object: the test as it began.
type Start struct {
	Connected []Connected `json:"connected,omitempty"`
	Version   string      `json:"version"`
	// SystemInfo is the measuring host's uname: sysname, nodename,
	// release, version and machine, as iperf3's get_system_info joins them.
	SystemInfo         string      `json:"system_info,omitempty"`
	Timestamp          *Timestamp  `json:"timestamp,omitempty"`
	ConnectingTo       *Connecting `json:"connecting_to,omitempty"`
	AcceptedConnection *Connecting `json:"accepted_connection,omitempty"` // a server's: its client
	Cookie             string      `json:"cookie,omitempty"`
	// TCPMSS is written with -M, TCPMSSDefault (the control connection's
	// MSS) without it.
	TCPMSS        int `json:"tcp_mss,omitempty"`
	TCPMSSDefault int `json:"tcp_mss_default,omitempty"`
	// SockBufsize is -w; SndbufActual and RcvbufActual what the kernel
	// gave the data sockets for it.
	SockBufsize   int        `json:"sock_bufsize,omitempty"`
	SndbufActual  int        `json:"sndbuf_actual,omitempty"`
	RcvbufActual  int        `json:"rcvbuf_actual,omitempty"`
	TargetBitrate uint64     `json:"target_bitrate,omitempty"`
	TestStart     *TestStart `json:"test_start,omitempty"`
}

// TimeFormat is the layout of Timestamp.Time, in UTC.
const TimeFormat = "Mon, 02 Jan 2006 15:04:05 GMT"

// Timestamp is when the test started.
type Timestamp struct {
	Time     string `json:"time"`
	Timesecs int64  `json:"timesecs"`
}

// Connected is one of start.connected: a stream's two ends.
type Connected struct {
	Socket     int    `json:"socket"`
	LocalHost  string `json:"local_host"`
	LocalPort  int    `json:"local_port"`
	RemoteHost string `json:"remote_host"`
	RemotePort int    `json:"remote_port"`
}

// Connecting is the server the client was told to reach.
type Connecting struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// TestStart is the test's parameters (reverse: 1 when the server sent).
type TestStart struct {
	Protocol   string `json:"protocol"`
	NumStreams int    `json:"num_streams"`
	Blksize    int    `json:"blksize"`
	Omit       int    `json:"omit"`
	Duration   int    `json:"duration"`
	Bytes      int    `json:"bytes"`
	Blocks     int    `json:"blocks"`
	Reverse    int    `json:"reverse"`
	TOS        int    `json:"tos"`
	// TargetBitrate is -b, per stream, bits/s (0: none).
	TargetBitrate uint64 `json:"target_bitrate"`
}

// Sum is the figures of one stream or of all, over an interval or the
// whole test.
type Sum struct {
	Socket        int      `json:"socket,omitempty"`
	Start         float64  `json:"start"`
	End           float64  `json:"end"`
	Seconds       float64  `json:"seconds"`
	Bytes         float64  `json:"bytes"`
	BitsPerSecond float64  `json:"bits_per_second"`
	Retransmits   *int64   `json:"retransmits,omitempty"`
	JitterMs      *float64 `json:"jitter_ms,omitempty"`
	LostPackets   *int64   `json:"lost_packets,omitempty"`
	Packets       *int64   `json:"packets,omitempty"`
	LostPercent   *float64 `json:"lost_percent,omitempty"`
	OutOfOrder    *int64   `json:"out_of_order,omitempty"`
	Omitted       *bool    `json:"omitted,omitempty"`
	Sender        bool     `json:"sender"`
	MeanRTT       *float64 `json:"mean_rtt,omitempty"` // µs, tcp sender streams
}

// IsOmitted says whether the interval falls in iperf3's omit period.
func (s Sum) IsOmitted() bool { return s.Omitted != nil && *s.Omitted }

// Interval is one interval report.
type Interval struct {
	Streams []Sum `json:"streams"`
	Sum     Sum   `json:"sum"`
}

// EndStream is one stream's totals: sender and receiver (tcp) or udp.
type EndStream struct {
	Sender   *Sum `json:"sender,omitempty"`
	Receiver *Sum `json:"receiver,omitempty"`
	UDP      *Sum `json:"udp,omitempty"`
}

// End is the document's end object: the totals.
type End struct {
	Streams     []EndStream `json:"streams,omitempty"`
	Sum         *Sum        `json:"sum,omitempty"`
	SumSent     *Sum        `json:"sum_sent,omitempty"`
	SumReceived *Sum        `json:"sum_received,omitempty"`
	CPU         *CPU        `json:"cpu_utilization_percent,omitempty"`
	// SenderTCPCongestion and ReceiverTCPCongestion name each side's
	// congestion-control algorithm (TCP_CONGESTION); TCP only.
	SenderTCPCongestion   string `json:"sender_tcp_congestion,omitempty"`
	ReceiverTCPCongestion string `json:"receiver_tcp_congestion,omitempty"`
}

// CPU is the CPU use of iperf3's host (the one writing the document) and
// the remote end: the process's user and system time over the test's
// wall time (getrusage), in percent; total is user plus system.
type CPU struct {
	HostTotal    float64 `json:"host_total"`
	HostUser     float64 `json:"host_user"`
	HostSystem   float64 `json:"host_system"`
	RemoteTotal  float64 `json:"remote_total"`
	RemoteUser   float64 `json:"remote_user"`
	RemoteSystem float64 `json:"remote_system"`
}
