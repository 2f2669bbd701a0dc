// Package iperf3wire speaks iperf3's own protocol (as of iperf 3.12), so
// that a stock iperf3 client can measure against a cnperf responder and
// cnperf can measure against a stock `iperf3 -s`.
//
// The protocol, learnt from iperf3's source (iperf_api.c, iperf_server_api.c,
// iperf_client_api.c, iperf_udp.c): the client opens a TCP control
// connection and sends a 37-byte cookie (36 characters of [a-z2-7] and a
// NUL). From then on the server drives the test with one-byte states on the
// control connection: PARAM_EXCHANGE (the client answers with its
// parameters as JSON, a 4-byte big-endian length and the text),
// CREATE_STREAMS (the client opens -P data connections, each again sending
// the cookie; for UDP it sends the 4-byte datagram "6789" from each
// stream's socket and waits for "9876"), TEST_START and TEST_RUNNING. The
// client ends the test with TEST_END; the server answers EXCHANGE_RESULTS,
// both sides swap their per-stream figures as JSON (client first), the
// server sends DISPLAY_RESULTS and the client closes with IPERF_DONE. An
// error is SERVER_ERROR followed by two big-endian int32s, iperf3's error
// code and an errno.
//
// UDP datagrams carry the send time (seconds, microseconds, 32 bits each)
// and a sequence number (32 or, with udp_counters_64bit, 64 bits), all
// big-endian; the receiver counts gaps as losses and computes RFC 1889's
// jitter from the send times.
package iperf3wire

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// CookieSize is the length of iperf3's cookie on the wire, NUL included.
const CookieSize = 37

// cookieAlphabet is what make_cookie draws the cookie's 36 characters from.
const cookieAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// States sent as one signed byte on the control connection.
const (
	stateTestStart       int8 = 1
	stateTestRunning     int8 = 2
	stateTestEnd         int8 = 4
	stateParamExchange   int8 = 9
	stateCreateStreams   int8 = 10
	stateServerTerminate int8 = 11
	stateClientTerminate int8 = 12
	stateExchangeResults int8 = 13
	stateDisplayResults  int8 = 14
	stateIperfDone       int8 = 16
	stateAccessDenied    int8 = -1
	stateServerError     int8 = -2
)

// iperf3's error codes (i_errno) that cnperf sends with SERVER_ERROR; the
// client prints iperf3's text for them.
const (
	errDuration      int32 = 5   // "test duration too long"
	errNumStreams    int32 = 6   // "number of parallel streams too large"
	errBlockSize     int32 = 7   // "block size too large"
	errBufSize       int32 = 8   // "socket buffer size too large"
	errMSS           int32 = 10  // "TCP MSS too large"
	errOmit          int32 = 12  // "bogus value for --omit"
	errUnsupported   int32 = 13  // "an option you are trying to set is not implemented yet"
	errUDPBlock      int32 = 20  // "block size invalid"
	errBadTOS        int32 = 21  // "bad TOS value"
	errReverseBidir  int32 = 25  // "cannot be both reverse and bidirectional"
	errRecvParams    int32 = 114 // "unable to receive parameters from client"
	errSetMSS        int32 = 123 // "unable to set TCP/SCTP MSS: " and the errno's text
	errSetBuf        int32 = 124 // "unable to set socket buffer size: " and the errno's text
	errSetTOS        int32 = 125 // "unable to set IP TOS: " and the errno's text
	errSetCOS        int32 = 126 // "unable to set IPv6 traffic class: " and the errno's text
	errSetFlow       int32 = 127 // "unable to set IPv6 flow label"
	errAffinity      int32 = 132 // "unable to set CPU affinity: " and the errno's text
	errSetPacing     int32 = 140 // "unable to set socket pacing: " and the errno's text
	errSetDontFrag   int32 = 145 // "unable to set IP Do-Not-Fragment flag"
	errSetCongestion int32 = 134 // "unable to set TCP_CONGESTION: Supplied congestion control algorithm not supported on this host"
	errSetBuf2       int32 = 141 // "socket buffer size not set correctly"
	errAuthTest      int32 = 142 // "test authorization failed" (IEAUTHTEST in 3.12, read from its client)
	errProtocol      int32 = 131 // "protocol does not exist"
	errStreamID      int32 = 208 // "stream has an invalid id"
)

// UDP stream set-up datagrams (host byte order in iperf3, which every
// platform it runs on reads as little-endian).
const (
	udpConnectMsg   uint32 = 0x36373839 // client → server
	udpConnectReply uint32 = 0x39383736 // server → client
	legacyUDPReply  uint32 = 987654321
)

// Limits iperf3 itself enforces.
const (
	maxTime        = 86400
	maxStreams     = 128
	maxBlockSize   = 1 << 20
	maxUDPBlock    = 65535 - 8 - 20
	minUDPBlock    = 16 // sec, usec and a 64-bit counter
	defaultTCPLen  = 128 << 10
	defaultUDPRate = 1 << 20 // iperf3's UDP default: 1 Mbit/s
	maxJSON        = 1 << 20 // bound on one JSON message of an admitted test
	// maxParamsJSON bounds a new test's parameters, read before the test
	// is admitted: iperf3's are a few hundred bytes (a title or extra
	// data a few more), so 16 KiB is ample and a stranger cannot make the
	// responder hold more.
	maxParamsJSON = 16 << 10
	// stepTimeout bounds each wait for the other side outside the test.
	stepTimeout = 10 * time.Second
	// grace is how long after the test's planned end the server waits for
	// TEST_END, as iperf3's server does (4 s × 10 state changes).
	grace = 40 * time.Second
)

// NewCookie returns a fresh cookie as iperf3's make_cookie makes one.
func NewCookie() [CookieSize]byte {
	var c [CookieSize]byte
	var rnd [CookieSize - 1]byte
	_, _ = rand.Read(rnd[:])
	for i, b := range rnd {
		c[i] = cookieAlphabet[int(b)%len(cookieAlphabet)]
	}
	return c
}

// IsCookieStart reports whether b could be the start of an iperf3 cookie.
func IsCookieStart(b []byte) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// validCookie checks a whole cookie read from the wire.
func validCookie(c []byte) bool {
	return len(c) == CookieSize && c[CookieSize-1] == 0 && IsCookieStart(c[:CookieSize-1])
}

// ctrl is a control connection with a deadline on every step.
type ctrl struct{ net.Conn }

func (c ctrl) deadline(d time.Duration) { _ = c.SetDeadline(time.Now().Add(d)) }

// writeDeadline bounds the writes that follow; reads keep their deadline
// (a new test's parameters are read under the responder's).
func (c ctrl) writeDeadline(d time.Duration) { _ = c.SetWriteDeadline(time.Now().Add(d)) }

func (c ctrl) writeState(s int8) error {
	c.writeDeadline(stepTimeout)
	if _, err := c.Write([]byte{byte(s)}); err != nil {
		return fmt.Errorf("iperf3 control: send state %d: %w", s, err)
	}
	return nil
}

// readState reads one state byte, waiting at most d.
func (c ctrl) readState(d time.Duration) (int8, error) {
	c.deadline(d)
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("iperf3 control: read state: %w", err)
	}
	return int8(b[0]), nil
}

func (c ctrl) writeJSON(v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("iperf3 control: encode JSON: %w", err)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	c.writeDeadline(stepTimeout)
	if _, err := c.Write(buf); err != nil {
		return fmt.Errorf("iperf3 control: send JSON: %w", err)
	}
	return nil
}

func (c ctrl) readJSON(v any) error {
	c.deadline(stepTimeout)
	return c.readJSONMax(v, maxJSON)
}

// readJSONMax reads one JSON message of at most limit bytes under the
// deadline already set.
func (c ctrl) readJSONMax(v any, limit uint32) error {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return fmt.Errorf("iperf3 control: read JSON length: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > limit {
		return fmt.Errorf("iperf3 control: JSON message of %d bytes, more than %d", size, limit)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return fmt.Errorf("iperf3 control: read JSON: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("iperf3 control: decode JSON: %w", err)
	}
	return nil
}

// writeError sends SERVER_ERROR with iperf3's error code and an errno.
func (c ctrl) writeError(code, errno int32) error {
	var b [9]byte
	b[0] = 0xFE // SERVER_ERROR (-2) as a signed byte
	binary.BigEndian.PutUint32(b[1:5], uint32(code))
	binary.BigEndian.PutUint32(b[5:9], uint32(errno))
	c.writeDeadline(stepTimeout)
	_, err := c.Write(b[:])
	return err
}

// readErrorCodes reads the two int32s after SERVER_ERROR.
func (c ctrl) readErrorCodes() (code, errno int32, err error) {
	c.deadline(stepTimeout)
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, err
	}
	return int32(binary.BigEndian.Uint32(b[0:4])), int32(binary.BigEndian.Uint32(b[4:8])), nil
}

// closeOnDone closes c when ctx ends, so that no blocking call outlives it.
func closeOnDone(ctx context.Context, c io.Closer) (stop func() bool) {
	return context.AfterFunc(ctx, func() { _ = c.Close() })
}

// streamResult is one stream in the results exchange. Numbers are
// float64 because iperf3 3.12 writes -1 ("not measured") as
// 18446744073709551615; see known.
type streamResult struct {
	ID          float64 `json:"id"`
	Bytes       float64 `json:"bytes"`
	Retransmits float64 `json:"retransmits"`
	Jitter      float64 `json:"jitter"` // seconds
	Errors      float64 `json:"errors"` // datagrams lost
	Packets     float64 `json:"packets"`
	StartTime   float64 `json:"start_time"`
	EndTime     float64 `json:"end_time"`
}

// results is one side's figures in the results exchange.
type results struct {
	CPUUtilTotal         float64        `json:"cpu_util_total"`
	CPUUtilUser          float64        `json:"cpu_util_user"`
	CPUUtilSystem        float64        `json:"cpu_util_system"`
	SenderHasRetransmits float64        `json:"sender_has_retransmits"`
	CongestionUsed       string         `json:"congestion_used,omitempty"`
	Streams              []streamResult `json:"streams"`
	// ServerOutputJSON is the server's own document, sent when the
	// client asked for it (--get-server-output).
	ServerOutputJSON json.RawMessage `json:"server_output_json,omitempty"`
}

// setCPU fills the CPU figures from one side's use.
func (r *results) setCPU(u probe.CPUUse) {
	r.CPUUtilTotal, r.CPUUtilUser, r.CPUUtilSystem = u.Pct, u.UserPct, u.SystemPct
}

// cpuUse returns the CPU figures as a CPUUse (iperf3 always sends all
// three).
func (r results) cpuUse() *probe.CPUUse {
	return &probe.CPUUse{Pct: r.CPUUtilTotal, UserPct: r.CPUUtilUser, SystemPct: r.CPUUtilSystem}
}

// known reports whether a figure from the peer was measured: iperf3
// writes -1 as -1 or, cast to unsigned, as 2^64-1.
func known(v float64) bool { return v >= 0 && v < 1<<63 }

// streamID returns iperf3's stream ids for n streams: 1, then 3, 4, ...
// (iperf_add_stream skips 2, and keeps doing so for compatibility).
func streamID(i int) int {
	if i == 0 {
		return 1
	}
	return i + 2
}
