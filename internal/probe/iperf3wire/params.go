package iperf3wire

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
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

// unsupportedKeys are options cnperf's iperf3 server refuses, with why.
var unsupportedKeys = map[string]string{
	"sctp":              "SCTP tests",
	"bidirectional":     "--bidir",
	"MSS":               "-M (MSS)",
	"window":            "-w (socket buffer)",
	"fqrate":            "--fq-rate",
	"burst":             "bursts (-b RATE/BURST)",
	"TOS":               "-S/--dscp (TOS)",
	"flowlabel":         "-L (flow label)",
	"congestion":        "-C (congestion control)",
	"get_server_output": "--get-server-output",
	"server_affinity":   "-A with a server CPU",
	"dont_fragment":     "--dont-fragment",
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
	var unknown, unsupported []string
	for k := range body {
		if why, ok := unsupportedKeys[k]; ok {
			unsupported = append(unsupported, why)
			continue
		}
		switch k {
		case "tcp", "udp", "time", "parallel", "reverse", "len", "bandwidth", "udp_counters_64bit",
			"omit", "num", "blockcount": // the last three are checked below: 0 only
		default:
			if !ignoredKeys[k] {
				unknown = append(unknown, k)
			}
		}
	}
	if len(unsupported) > 0 {
		sort.Strings(unsupported)
		return p, &refusal{errUnsupported, "iperf3 options cnperf's responder does not serve: " + strings.Join(unsupported, ", ")}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return p, &refusal{errUnsupported, "unknown iperf3 parameters: " + strings.Join(unknown, ", ")}
	}
	for _, k := range []string{"omit", "num", "blockcount"} {
		if _, ok := body[k]; !ok {
			continue
		}
		v, err := num(k)
		if err != nil {
			return p, err
		}
		if v != 0 {
			flag := map[string]string{"omit": "-O (omit)", "num": "-n (bytes)", "blockcount": "-k (blocks)"}[k]
			return p, &refusal{errUnsupported, "iperf3 option " + flag + " is not served; use -t"}
		}
	}
	_, p.TCP = body["tcp"]
	_, p.UDP = body["udp"]
	_, p.Reverse = body["reverse"]
	_, p.Counters64 = body["udp_counters_64bit"]
	if p.TCP == p.UDP {
		return p, &refusal{errProtocol, "parameters name neither tcp nor udp (or both)"}
	}
	if _, ok := body["client_version"]; ok {
		_ = json.Unmarshal(body["client_version"], &p.ClientVer)
	}
	ints := []struct {
		key string
		dst *int
	}{{"time", &p.Time}, {"parallel", &p.Parallel}, {"len", &p.Len}, {"pacing_timer", &p.PacingTimer}}
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
	if _, ok := body["bandwidth"]; ok {
		v, err := num("bandwidth")
		if err != nil {
			return p, err
		}
		p.Bandwidth = uint64(v)
	}
	switch {
	case p.Time <= 0:
		return p, &refusal{errUnsupported, "a test without -t (a time limit) is not served"}
	case p.Time > maxTime:
		return p, &refusal{errDuration, fmt.Sprintf("-t %d: more than %d seconds", p.Time, maxTime)}
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
	return m
}
