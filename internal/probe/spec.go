package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Probe kinds served by cnperf's own engines.
const (
	KindTCP   = "tcp"
	KindUDP   = "udp"
	KindRR    = "rr"
	KindPing  = "ping"
	KindTrace = "trace"
	KindStamp = "stamp"
	// KindWire watches a node's underlay for one flow and reports the
	// DSCP its packets carry on the wire (internal/probe/wirewatch).
	KindWire = "wire"
	// KindQueue samples a node's qdisc backlogs and loss counters
	// (internal/probe/queuewatch).
	KindQueue = "queue"
	// KindConnect samples TCP connects to a responder every few
	// milliseconds and reports when their outcome changed
	// (internal/probe/connect).
	KindConnect = "connect"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("10s", "100ms"); it also accepts a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration must be a string like \"10s\" or a number of seconds, got %s", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// Spec describes one probe run. Fields that a kind does not use are ignored
// by it; Validate of each Prober rejects values it cannot honour.
type Spec struct {
	Kind string `json:"kind"`
	// Target is the responder's HOST:PORT (tcp, udp, rr) or a host (ping,
	// trace).
	Target string `json:"target"`
	// Source is an optional local address to bind to.
	Source string `json:"source,omitempty"`
	// SourcePort is the local port of the data socket (udp); 0 lets the
	// kernel choose. A fixed port lets a wire watch single the flow out
	// by its 5-tuple.
	SourcePort int `json:"source_port,omitempty"`

	Duration Duration `json:"duration,omitempty"` // test length; 0 means the kind's default
	// StartDelay waits this long before measuring (at most MaxStartDelay),
	// so that a companion task of the same run (a wire watch) is ready
	// before the first packet.
	StartDelay Duration `json:"start_delay,omitempty"`

	Interval Duration `json:"interval,omitempty"` // interval reports (tcp, udp) or packet interval (ping)
	Streams  int      `json:"streams,omitempty"`  // parallel streams (tcp)
	Reverse  bool     `json:"reverse,omitempty"`  // responder sends, client receives

	// RateBps is the target rate in bits per second (udp; tcp when set). Nil
	// means the kind's default; 0 means as fast as the host can.
	RateBps *uint64 `json:"rate_bps,omitempty"`
	// Size is the payload per datagram (udp), per write (tcp), per request
	// (rr) or per echo (ping), in bytes.
	Size int `json:"size,omitempty"`
	// Proto selects rr's transport: tcp, udp or crr (connect, request,
	// response, close).
	Proto string `json:"proto,omitempty"`
	// Count bounds the number of packets (ping) or transactions (rr); 0
	// means run for Duration.
	Count int `json:"count,omitempty"`

	// TOS is the IPv4 TOS / IPv6 traffic class byte put on every packet,
	// SYN included (DSCP << 2 | ECN). Nil means unmarked (0).
	TOS *int `json:"tos,omitempty"`

	// Offload is "auto" (the default: UDP GSO and GRO where the kernel has
	// them) or "off" (one datagram per mmsg entry, so every device,
	// qdisc and netfilter rule on the path sees real datagrams) (udp).
	Offload string `json:"offload,omitempty"`

	WindowBytes int `json:"window_bytes,omitempty"` // socket buffer size (tcp, udp)
	// Congestion is the TCP congestion control of the sending sockets
	// (tcp; "cubic", "bbr"; TCP_CONGESTION); "" keeps the node's default.
	Congestion string `json:"congestion,omitempty"`
	MSS        int    `json:"mss,omitempty"` // TCP maximum segment size

	// Histogram bins for one-way latency (udp) or RTT (rr): bin width and
	// count, like iperf2's --udp-histogram=5u,200.
	HistBinWidth Duration `json:"hist_bin_width,omitempty"`
	HistBins     int      `json:"hist_bins,omitempty"`

	// Watch is the flow a wire watch looks for (wire).
	Watch *WatchFlow `json:"watch,omitempty"`

	// DontFragment sets DF on every echo (ping): a packet too big for a
	// link is dropped, not fragmented, and once the kernel has learnt the
	// path's MTU from the ICMP "fragmentation needed" it refuses larger
	// sends (counted in Packets.TooBig), as a DF size sweep needs.
	DontFragment bool `json:"dont_fragment,omitempty"`

	// MaxTTL bounds traceroute.
	MaxTTL int `json:"max_ttl,omitempty"`
	// Timeout bounds each wait for a reply (ping, trace, rr) and the control
	// connection's set-up; 0 means the kind's default.
	Timeout Duration `json:"timeout,omitempty"`
}

// MaxStartDelay bounds Spec.StartDelay.
const MaxStartDelay = 10 * time.Second

// Offload modes (Spec.Offload).
const (
	OffloadAuto = "auto"
	OffloadOff  = "off"
)

// Request returns what the spec asks for, as a result echoes it. Every
// run's result gets it in one place: Registry.Run, and iperf3wire.Run for
// an iperf3 peer.
func (s Spec) Request() *Request {
	r := &Request{
		Direction: DirectionForward, Streams: max(s.Streams, 1),
		Size: s.Size, DurationS: s.Duration.D().Seconds(), DSCP: s.DSCP(),
		Count: s.Count, IntervalS: s.Interval.D().Seconds(), Proto: s.Proto,
		WindowBytes: s.WindowBytes, MSS: s.MSS,
	}
	if s.Reverse {
		r.Direction = DirectionReverse
	}
	if s.RateBps != nil {
		v := *s.RateBps
		r.RateBps = &v
	}
	if s.TOS != nil {
		v := *s.TOS
		r.TOS = &v
	}
	return r
}

// DSCP returns the DSCP code point (0-63) of the spec's TOS byte.
func (s Spec) DSCP() int {
	if s.TOS == nil {
		return 0
	}
	return *s.TOS >> 2
}

// TOSByte returns the TOS byte to set on sockets (0 when unmarked).
func (s Spec) TOSByte() int {
	if s.TOS == nil {
		return 0
	}
	return *s.TOS
}

// DurationOr returns the spec's duration, or def when it is unset.
func (s Spec) DurationOr(def time.Duration) time.Duration {
	if s.Duration > 0 {
		return s.Duration.D()
	}
	return def
}

// IntervalOr returns the spec's interval, or def when it is unset.
func (s Spec) IntervalOr(def time.Duration) time.Duration {
	if s.Interval > 0 {
		return s.Interval.D()
	}
	return def
}

// TimeoutOr returns the spec's timeout, or def when it is unset.
func (s Spec) TimeoutOr(def time.Duration) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout.D()
	}
	return def
}

// ValidateCommon checks the fields every kind shares: no negative durations
// or counts, a TOS byte in range, and a target that parses as HOST:PORT when
// needPort is set (or as a host otherwise).
func (s Spec) ValidateCommon(needPort bool) error {
	var errs []error
	if s.Target == "" {
		errs = append(errs, errors.New("target: missing (want HOST:PORT or HOST)"))
	} else if needPort {
		host, port, err := net.SplitHostPort(s.Target)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %q: want HOST:PORT: %w", s.Target, err))
		} else if host == "" {
			errs = append(errs, fmt.Errorf("target %q: empty host", s.Target))
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("target %q: port must be 1-65535", s.Target))
		}
	}
	if s.Source != "" && net.ParseIP(s.Source) == nil {
		errs = append(errs, fmt.Errorf("source %q: not an IP address", s.Source))
	}
	if s.SourcePort < 0 || s.SourcePort > 65535 {
		errs = append(errs, fmt.Errorf("source_port %d: must be 0-65535", s.SourcePort))
	}
	if s.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %v: must not be negative", s.Duration.D()))
	}
	if s.StartDelay < 0 || s.StartDelay.D() > MaxStartDelay {
		errs = append(errs, fmt.Errorf("start_delay %v: must be 0 to %v", s.StartDelay.D(), MaxStartDelay))
	}
	if s.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %v: must not be negative", s.Interval.D()))
	}
	if s.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must not be negative", s.Timeout.D()))
	}
	if s.Streams < 0 {
		errs = append(errs, fmt.Errorf("streams %d: must not be negative", s.Streams))
	}
	if s.Size < 0 {
		errs = append(errs, fmt.Errorf("size %d: must not be negative", s.Size))
	}
	if s.Count < 0 {
		errs = append(errs, fmt.Errorf("count %d: must not be negative", s.Count))
	}
	if s.WindowBytes < 0 {
		errs = append(errs, fmt.Errorf("window %d: must not be negative", s.WindowBytes))
	}
	if s.MSS < 0 {
		errs = append(errs, fmt.Errorf("mss %d: must not be negative", s.MSS))
	}
	if s.HistBinWidth < 0 || s.HistBins < 0 {
		errs = append(errs, errors.New("histogram: bin width and count must not be negative"))
	}
	if s.TOS != nil && (*s.TOS < 0 || *s.TOS > 255) {
		errs = append(errs, fmt.Errorf("tos %d: must be 0-255", *s.TOS))
	}
	return errors.Join(errs...)
}

// Env carries what a probe run needs from its caller: nothing comes from
// globals.
type Env struct {
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// OnInterval, when set, receives each interval report as it completes
	// (for live output); it must not block.
	OnInterval func(Interval)
	// OnReply, when set, receives each echo reply as it arrives (ping,
	// and stamp's reflected packets), as ping(8) prints a line per reply;
	// it must not block.
	OnReply func(Reply)
	// OnHop, when set, receives each traceroute hop as it completes
	// (trace), as traceroute prints a line per hop; it must not block.
	OnHop func(Hop)
	// AuthKey, when set, is the shared key of an authenticated probe
	// (stamp's HMAC). It travels beside the spec, never in it, so it is
	// neither stored nor reported with the task.
	AuthKey []byte
	// TestKey, when set, is the session's test key for a responder that
	// serves only scheduled tests (tcp, udp, rr; see KeyChecker). Like
	// AuthKey it travels beside the spec, never in it.
	TestKey string
}

// Reply is one echo reply as it arrived (ping).
type Reply struct {
	Seq   int     // the echo's sequence number, from 0
	From  string  // the replying address
	Bytes int     // ICMP payload bytes
	RTTms float64 // round-trip time
}

// Log returns the env's logger, or one that discards.
func (e Env) Log() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Clock returns the env's time source.
func (e Env) Clock() func() time.Time {
	if e.Now != nil {
		return e.Now
	}
	return time.Now
}

// ParseKind normalises a kind name and checks it is known.
func ParseKind(s string) (string, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	switch k {
	case KindTCP, KindUDP, KindRR, KindPing, KindTrace, KindStamp, KindWire, KindQueue, KindConnect:
		return k, nil
	case "traceroute":
		return KindTrace, nil
	}
	return "", fmt.Errorf("unknown probe kind %q (want tcp, udp, rr, ping, trace, stamp, wire, queue or connect)", s)
}
