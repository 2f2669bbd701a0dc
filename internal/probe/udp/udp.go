// Package udp is cnperf's UDP engine, both ends: a Prober (client) and a
// engine.Handler (responder side). One end sends datagrams at a target rate,
// each carrying a sequence number and its send time; the other counts them:
// loss, reordering, duplicates, RFC 3550 jitter, one-way latency (summary
// and histogram), packets per second and the DSCP that arrived.
//
// Sending uses sendmmsg with UDP GSO and receiving recvmmsg with UDP GRO
// where the kernel allows (package udpio), with a clean fallback that the
// result's notes name. Pacing follows an absolute schedule (datagram i at
// start + i × gap): batches go out when due, short waits are spun through
// and long ones slept with the thread's timer slack lowered, so a late
// wake-up never lowers the average rate.
//
// The client sends by default; with Reverse the responder sends from its
// shared UDP port to the address the client's hello datagrams came from,
// which works behind NAT. The receiver measures; the sender tells it how
// many datagrams it sent over the control connection. One-way latency is
// exact when both ends share a kernel clock, and otherwise corrected by the
// clock offset estimated on the control connection, with the error bound in
// the result.
package udp

import (
	"errors"
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Defaults.
const (
	DefaultSize     = 1400      // payload bytes per datagram
	DefaultRateBps  = 1_000_000 // 1 Mbit/s, as iperf3's UDP default
	DefaultDuration = probe.DefaultTestDuration
	DefaultInterval = time.Second
	MinInterval     = 100 * time.Millisecond
	// DefaultHistBinWidth and DefaultHistBins make the latency histogram:
	// 10 µs bins up to 2 ms (the last bin holds everything beyond).
	DefaultHistBinWidth = 10 * time.Microsecond
	DefaultHistBins     = 200
	maxHistBins         = 100_000
	maxDuration         = 24 * time.Hour
)

// recvBuffer is the receive buffer a receiving client asks for.
const recvBuffer = 32 << 20

// Validate checks a udp spec; the client and the responder both use it.
func Validate(spec probe.Spec) error {
	var errs []error
	if err := spec.ValidateCommon(true); err != nil {
		errs = append(errs, err)
	}
	if spec.Size != 0 && (spec.Size < HeaderLen || spec.Size > udpio.MaxDatagram) {
		errs = append(errs, fmt.Errorf("size %d: a udp datagram carries %d to %d bytes of payload", spec.Size, HeaderLen, udpio.MaxDatagram))
	}
	switch spec.Offload {
	case "", probe.OffloadAuto, probe.OffloadOff:
	default:
		errs = append(errs, fmt.Errorf("offload %q: want %q or %q", spec.Offload, probe.OffloadAuto, probe.OffloadOff))
	}
	if spec.Streams > 1 {
		errs = append(errs, fmt.Errorf("streams %d: the udp probe runs one stream (for iperf3's -u -P N, --peer iperf3: cnperf's responder serves it too)", spec.Streams))
	}
	if spec.Interval > 0 && spec.Interval.D() < MinInterval {
		errs = append(errs, fmt.Errorf("interval %v: must be at least %v", spec.Interval.D(), MinInterval))
	}
	if spec.Duration.D() > maxDuration {
		errs = append(errs, fmt.Errorf("duration %v: at most %v", spec.Duration.D(), maxDuration))
	}
	if spec.HistBins > maxHistBins {
		errs = append(errs, fmt.Errorf("histogram bins %d: at most %d", spec.HistBins, maxHistBins))
	}
	if spec.HistBinWidth > 0 && spec.HistBinWidth.D() < time.Nanosecond {
		errs = append(errs, errors.New("histogram bin width: at least 1ns"))
	}
	return errors.Join(errs...)
}

// withDefaults fills what the user left unset, so both ends see the same
// plan.
func withDefaults(spec probe.Spec) probe.Spec {
	if spec.Size == 0 {
		spec.Size = DefaultSize
	}
	if spec.RateBps == nil {
		r := uint64(DefaultRateBps)
		spec.RateBps = &r
	}
	spec.Duration = probe.Duration(spec.DurationOr(DefaultDuration))
	spec.Interval = probe.Duration(spec.IntervalOr(DefaultInterval))
	if spec.Streams == 0 {
		spec.Streams = 1
	}
	w, n := histogram(spec)
	spec.HistBinWidth, spec.HistBins = probe.Duration(w), n
	return spec
}

// histogram returns the latency histogram's bin width and count.
func histogram(spec probe.Spec) (time.Duration, int) {
	w, n := spec.HistBinWidth.D(), spec.HistBins
	if w <= 0 {
		w = DefaultHistBinWidth
	}
	if n <= 0 {
		n = DefaultHistBins
	}
	return w, n
}

// offloadOptions returns opts with segmentation and receive offload
// turned off when the spec asks for real datagrams (--offload off).
func offloadOptions(opts udpio.Options, spec probe.Spec) udpio.Options {
	if spec.Offload == probe.OffloadOff {
		opts.NoOffload = true
	}
	return opts
}

// plan returns the sending plan of spec (defaults applied).
func plan(id engine.SessionID, spec probe.Spec) sendPlan {
	return sendPlan{session: id, size: spec.Size, rateBps: *spec.RateBps, duration: spec.Duration.D()}
}
