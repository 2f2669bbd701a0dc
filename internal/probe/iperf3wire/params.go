package iperf3wire

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"syscall"
)

// Params is the test a client asks for (send_parameters in iperf3).
type Params struct {
	TCP         bool
	UDP         bool
	Time        int    // seconds
	Parallel    int    // streams
	Reverse     bool   // the server sends
	Len         int    // bytes per write or datagram
	Bandwidth   uint64 // bits/s per stream; 0 = unlimited
	Counters64  bool   // 64-bit UDP sequence numbers
	ClientVer   string // client_version
	PacingTimer int    // µs, the sender's pacing granularity
	// Omit is -O: seconds at the start that neither side counts.
	Omit int
	// Bytes (-n) and Blocks (-k) end the test once the client has sent
	// or received that much; the client decides, the server serves until
	// TEST_END. Time is 0 when one of them is set.
	Bytes, Blocks uint64
	Bidir         bool   // --bidir: both sides send, on streams of their own
	Window        int    // -w: SO_SNDBUF and SO_RCVBUF of the data sockets, bytes
	MSS           int    // -M: TCP_MAXSEG of the TCP data sockets
	Congestion    string // -C: TCP_CONGESTION of the TCP data sockets
	TOS           int    // -S: the TOS byte (IPv6 traffic class) the server marks its data with
	// ServerOutput is --get-server-output: the server adds its own
	// document to its results.
	ServerOutput bool
}

// Conns is the number of data streams the test opens: -P, twice with
// --bidir (the client's sending streams first, then its receiving ones).
func (p Params) Conns() int {
	if p.Bidir {
		return 2 * p.Parallel
	}
	return p.Parallel
}

// ServerSends reports whether the server sends on the i-th stream (from
// 0) in the order the client opens them.
func (p Params) ServerSends(i int) bool {
	if p.Bidir {
		return i >= p.Parallel
	}
	return p.Reverse
}

// refusal is a client's request the responder does not serve, with the
// iperf3 error code that says so on the wire.
type refusal struct {
	code int32
	msg  string
}

func (r *refusal) Error() string { return r.msg }

// ignoredKeys are parameters that change nothing on the server's side of
// a test cnperf serves (labels, the client's own socket choices, or an
// authentication token for a server that has no users configured, which
// iperf3's server also ignores).
var ignoredKeys = map[string]bool{
	"title": true, "extra_data": true, "congestion_used": true, "client_version": true,
	"pacing_timer": true, "repeating_payload": true, "zerocopy": true, "authtoken": true,
	"nodelay": true,
}

// Bounds on the options a client may ask for, as iperf3's client checks
// them (iperf_parse_arguments: -O up to 60 s, -w up to 512 MiB, -M up to
// 9 KiB) and as the kernel names a congestion-control algorithm
// (TCP_CA_NAME_MAX: 15 characters and a NUL).
const (
	maxOmit       = 60
	maxWindow     = 512 << 20
	maxMSS        = 9 * 1024
	maxCongestion = 15
)

// unsupported is an option cnperf's iperf3 server refuses: the flag, and
// the iperf3 error code (with an errno where iperf3 prints one) whose text
// names it on the client: "unable to set socket pacing: Operation not
// supported" rather than iperf3's generic "not implemented yet".
type unsupported struct {
	flag  string
	code  int32
	errno syscall.Errno
}

// unsupportedKeys are the options cnperf's iperf3 server refuses.
var unsupportedKeys = map[string]unsupported{
	"sctp":            {"--sctp", errProtocol, 0},
	"fqrate":          {"--fq-rate", errSetPacing, syscall.EOPNOTSUPP},
	"burst":           {"-b RATE/BURST", errUnsupported, 0},
	"flowlabel":       {"-L (flow label)", errSetFlow, 0},
	"server_affinity": {"-A with a server CPU", errAffinity, syscall.EOPNOTSUPP},
	"dont_fragment":   {"--dont-fragment", errSetDontFrag, 0},
}

// ParseParams reads and checks a client's parameters. A *refusal error
// names an option cnperf does not serve; the server sends its code.
func ParseParams(body map[string]json.RawMessage) (Params, error) {
	var p Params
	num := func(k string) (float64, error) {
		var v float64
		if err := json.Unmarshal(body[k], &v); err != nil || math.IsNaN(v) || v < 0 {
			return 0, &refusal{errUnsupported, fmt.Sprintf("parameter %q: want a non-negative number, got %s", k, body[k])}
		}
		return v, nil
	}
	var unknown []string
	var refused []string
	first := unsupported{code: errUnsupported}
	for k := range body {
		if u, ok := unsupportedKeys[k]; ok {
			refused = append(refused, u.flag)
			if len(refused) == 1 || u.flag < first.flag {
				first = u
			}
			continue
		}
		switch k {
		case "tcp", "udp", "time", "parallel", "reverse", "len", "bandwidth", "udp_counters_64bit",
			"omit", "num", "blockcount", "bidirectional", "MSS", "window", "congestion", "TOS",
			"get_server_output":
		default:
			if !ignoredKeys[k] {
				unknown = append(unknown, k)
			}
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return p, &sysRefusal{code: first.code, errno: first.errno,
			msg: "iperf3 options cnperf's responder does not serve: " + strings.Join(refused, ", ")}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return p, &refusal{errUnsupported, "unknown iperf3 parameters: " + strings.Join(unknown, ", ")}
	}
	_, p.TCP = body["tcp"]
	_, p.UDP = body["udp"]
	_, p.Reverse = body["reverse"]
	_, p.Counters64 = body["udp_counters_64bit"]
	_, p.Bidir = body["bidirectional"]
	_, p.ServerOutput = body["get_server_output"]
	if p.TCP == p.UDP {
		return p, &refusal{errProtocol, "parameters name neither tcp nor udp (or both)"}
	}
	if p.Reverse && p.Bidir {
		return p, &refusal{errReverseBidir, "-R and --bidir together"}
	}
	if _, ok := body["client_version"]; ok {
		_ = json.Unmarshal(body["client_version"], &p.ClientVer)
	}
	if raw, ok := body["congestion"]; ok {
		if err := json.Unmarshal(raw, &p.Congestion); err != nil || !validCongestion(p.Congestion) {
			return p, &refusal{errSetCongestion, fmt.Sprintf("-C %s: not a congestion-control name", raw)}
		}
	}
	ints := []struct {
		key string
		dst *int
	}{{"time", &p.Time}, {"parallel", &p.Parallel}, {"len", &p.Len}, {"pacing_timer", &p.PacingTimer},
		{"omit", &p.Omit}, {"MSS", &p.MSS}, {"window", &p.Window}, {"TOS", &p.TOS}}
	for _, f := range ints {
		if _, ok := body[f.key]; !ok {
			continue
		}
		v, err := num(f.key)
		if err != nil {
			return p, err
		}
		if v > math.MaxInt32 {
			return p, &refusal{errUnsupported, fmt.Sprintf("parameter %q too large: %v", f.key, v)}
		}
		*f.dst = int(v)
	}
	u64s := []struct {
		key string
		dst *uint64
	}{{"bandwidth", &p.Bandwidth}, {"num", &p.Bytes}, {"blockcount", &p.Blocks}}
	for _, f := range u64s {
		if _, ok := body[f.key]; !ok {
			continue
		}
		v, err := num(f.key)
		if err != nil {
			return p, err
		}
		if v >= 1<<63 {
			return p, &refusal{errUnsupported, fmt.Sprintf("parameter %q too large: %v", f.key, v)}
		}
		*f.dst = uint64(v)
	}
	switch {
	case p.Time <= 0 && p.Bytes == 0 && p.Blocks == 0:
		return p, &refusal{errUnsupported, "a test without -t, -n or -k (an end) is not served"}
	case p.Time+p.Omit > maxTime:
		return p, &refusal{errDuration, fmt.Sprintf("-t %d -O %d: more than %d seconds", p.Time, p.Omit, maxTime)}
	case p.Omit > maxOmit:
		return p, &refusal{errOmit, fmt.Sprintf("-O %d: more than %d seconds", p.Omit, maxOmit)}
	case p.Window > maxWindow:
		return p, &refusal{errBufSize, fmt.Sprintf("-w %d: more than %d bytes", p.Window, maxWindow)}
	case p.MSS > maxMSS:
		return p, &refusal{errMSS, fmt.Sprintf("-M %d: more than %d bytes", p.MSS, maxMSS)}
	case p.TOS > 255:
		return p, &refusal{errBadTOS, fmt.Sprintf("-S %d: a TOS byte is 0-255", p.TOS)}
	}
	if p.Parallel <= 0 {
		p.Parallel = 1
	}
	if p.Parallel > maxStreams {
		return p, &refusal{errNumStreams, fmt.Sprintf("-P %d: more than %d streams", p.Parallel, maxStreams)}
	}
	if p.UDP {
		if p.Len == 0 {
			p.Len = 1460
		}
		if p.Len < minUDPBlock || p.Len > maxUDPBlock {
			return p, &refusal{errUDPBlock, fmt.Sprintf("-l %d: UDP datagrams must be %d-%d bytes", p.Len, minUDPBlock, maxUDPBlock)}
		}
	} else {
		if p.Len == 0 {
			p.Len = defaultTCPLen
		}
		if p.Len > maxBlockSize {
			return p, &refusal{errBlockSize, fmt.Sprintf("-l %d: more than %d bytes", p.Len, maxBlockSize)}
		}
	}
	return p, nil
}

// validCongestion reports whether name can be a Linux congestion-control
// algorithm's name (what TCP_CONGESTION takes): 1-15 of [a-z0-9_-].
func validCongestion(name string) bool {
	if name == "" || len(name) > maxCongestion {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// wire returns the parameters as an iperf3 client sends them.
func (p Params) wire() map[string]any {
	m := map[string]any{
		"omit": 0, "time": p.Time, "num": 0, "blockcount": 0,
		"parallel": p.Parallel, "len": p.Len, "pacing_timer": 1000,
		"client_version": "3.12",
	}
	if p.UDP {
		m["udp"] = true
	} else {
		m["tcp"] = true
	}
	if p.Reverse {
		m["reverse"] = true
	}
	if p.Bandwidth > 0 {
		m["bandwidth"] = p.Bandwidth
	}
	if p.Counters64 {
		m["udp_counters_64bit"] = 1
	}
	for k, v := range map[string]int{"TOS": p.TOS, "window": p.Window, "MSS": p.MSS} {
		if v != 0 {
			m[k] = v
		}
	}
	return m
}
