package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/external"
	"github.com/cnperf/cnperf/internal/probe/udp"
)

// A test can be asked for as a v2 probe spec or as a v1 tool's arguments
// (iperf3, iperf2). Both are turned into one testLoad and held against the
// limits by one check, so that no way of asking escapes a limit the other
// way honours.

// Defaults of the tools when their arguments leave a figure out.
const (
	iperfUDPDefaultBps  = 1_000_000 // iperf3 and iperf2 -u without -b
	iperf3UDPDefaultLen = 1460      // iperf3 -u without -l
	iperf2UDPDefaultLen = 1470      // iperf2 -u without -l
)

// testLoad is what one test asks of the network.
type testLoad struct {
	udp bool

	duration      time.Duration
	durationField string
	durationArg   string // how the request said it: "10m1s", "-t 601"

	streams      int // at least 1
	streamsField string
	streamsArg   string

	// rateBps is the rate of each stream in bit/s (0: none asked, or
	// unlimited when unlimited is set); totalRate says rateBps is already
	// the sum over the streams (a tcp spec's rate_bps).
	rateBps   uint64
	totalRate bool
	unlimited bool
	// pps is a rate asked in packets per second per stream (iperf2 NNpps).
	pps       float64
	rateField string
	rateArg   string

	size int // datagram payload in bytes (udp)
}

// checkLoad holds ld against the limits: duration, streams, the total bit
// rate (per-stream rate times streams) and, for UDP, the total packet rate
// (a bit rate turned into packets with the datagram size). UDP without a
// rate bound is refused: it has no packet rate to hold.
func (l Limits) checkLoad(ld testLoad) error {
	if ld.duration > l.MaxDuration {
		return overLimit(ld.durationField, "%s: over the limit of %s (--max-task-duration)", ld.durationArg, l.MaxDuration)
	}
	streams := max(ld.streams, 1)
	if streams > l.MaxStreams {
		return overLimit(ld.streamsField, "%s: over the limit of %d streams (--max-streams)", ld.streamsArg, l.MaxStreams)
	}
	if ld.udp && ld.unlimited {
		return overLimit(ld.rateField, "%s: UDP as fast as the host can has no packet rate bound; give a rate (the limits are %d bit/s, --max-rate, and %.0f packets/s, --max-packet-rate)",
			ld.rateArg, l.MaxRateBps, l.MaxPacketRate)
	}
	times := ""
	if streams > 1 && !ld.totalRate {
		times = fmt.Sprintf(" x %d streams", streams)
	}
	total := float64(ld.rateBps)
	if !ld.totalRate {
		total *= float64(streams)
	}
	if ld.pps > 0 && ld.size > 0 {
		total = ld.pps * float64(8*ld.size) * float64(streams)
	}
	if total > float64(l.MaxRateBps) {
		return overLimit(ld.rateField, "%s%s is %.0f bit/s in all: over the limit of %d bit/s (--max-rate)", ld.rateArg, times, total, l.MaxRateBps)
	}
	if !ld.udp {
		return nil
	}
	pps := ld.pps * float64(streams)
	sized := ""
	if ld.pps == 0 && ld.size > 0 {
		pps = total / float64(8*ld.size)
		sized = fmt.Sprintf(" at %d bytes a datagram", ld.size)
	}
	if pps > l.MaxPacketRate {
		return overLimit(ld.rateField, "%s%s%s is %.0f packets/s in all: over the limit of %.0f packets/s (--max-packet-rate)", ld.rateArg, times, sized, pps, l.MaxPacketRate)
	}
	return nil
}

// loadOfSpec is what a probe spec asks; prefix ends in "spec.". A tcp
// spec's rate_bps is the sum over its streams; udp runs one stream.
func loadOfSpec(prefix string, sp probe.Spec) testLoad {
	ld := testLoad{
		udp:      sp.Kind == probe.KindUDP,
		duration: sp.Duration.D(), durationField: prefix + "duration", durationArg: sp.Duration.D().String(),
		streams: max(sp.Streams, 1), streamsField: prefix + "streams", streamsArg: strconv.Itoa(sp.Streams),
		totalRate: true, rateField: prefix + "rate_bps",
	}
	if sp.RateBps != nil {
		ld.rateBps = *sp.RateBps
		ld.rateArg = fmt.Sprintf("%d bit/s", *sp.RateBps)
	}
	if ld.udp {
		ld.size = udp.DefaultSize
		if sp.Size > 0 {
			ld.size = sp.Size
		}
		if sp.RateBps == nil {
			ld.rateBps = udp.DefaultRateBps
			ld.rateArg = fmt.Sprintf("%d bit/s (the default)", ld.rateBps)
		}
		ld.unlimited = ld.rateBps == 0
		ld.rateArg = "rate_bps " + ld.rateArg
	}
	return ld
}

// loadOfTool is what an iperf3 or iperf2 run asks by its validated
// arguments args; field names the arguments in the request. -b is per
// stream (iperf's own meaning), so -P multiplies it.
func loadOfTool(field, tool string, args []string) testLoad {
	ld := testLoad{durationField: field, streamsField: field, rateField: field, streams: 1}
	var rate, fq, length string
	seconds := 0.0
	for i := 0; i < len(args); i++ {
		flag, val := args[i], ""
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val = args[i+1]
		}
		switch flag {
		case "-u", "--udp":
			ld.udp = true
		case "-t", "--time", "-O", "--omit":
			if v, err := strconv.ParseFloat(val, 64); err == nil {
				seconds += v
				ld.durationArg = strings.TrimSpace(ld.durationArg + " " + flag + " " + val)
			}
		case "-P", "--parallel":
			if n, err := strconv.Atoi(val); err == nil {
				ld.streams, ld.streamsArg = n, flag+" "+val
			}
		case "-b", "--bitrate", "--bandwidth":
			rate = flag + " " + val
		case "--fq-rate":
			fq = val
		case "-l", "--length", "--len":
			length = val
		}
	}
	ld.duration = time.Duration(seconds * float64(time.Second))
	if seconds == 0 {
		ld.duration, ld.durationArg = 10*time.Second, "-t 10 (the default)"
	}
	ld.durationArg = "runs for " + ld.duration.String() + " by " + ld.durationArg
	if ld.udp {
		ld.size = iperf3UDPDefaultLen
		if tool == external.ToolIperf2 {
			ld.size = iperf2UDPDefaultLen
		}
		if n, ok := parseToolSize(length); ok && n > 0 {
			ld.size = n
		}
	}
	switch {
	case rate != "":
		ld.rateArg = rate
		val := rate[strings.IndexByte(rate, ' ')+1:]
		if pps, ok := strings.CutSuffix(val, "pps"); ok {
			r, err := probe.ParseRate(pps) // the k, M, G suffixes
			if err == nil {
				ld.pps = float64(r)
				ld.udp = true // iperf2 sends datagrams at a packet rate
				if ld.size == 0 {
					ld.size = iperf2UDPDefaultLen
				}
				ld.unlimited = r == 0
			}
			break
		}
		if r, err := probe.ParseRate(val); err == nil {
			ld.rateBps = r
			ld.unlimited = r == 0
		}
	case ld.udp:
		ld.rateBps = iperfUDPDefaultBps
		ld.rateArg = "-u without -b (1 Mbit/s)"
	}
	// --fq-rate caps each stream's pacing: the stream's rate is the lower.
	if r, err := probe.ParseRate(fq); fq != "" && err == nil && r > 0 && (ld.pps == 0) && (ld.unlimited || ld.rateBps == 0 || r < ld.rateBps) {
		ld.rateBps, ld.unlimited, ld.rateArg = r, false, "--fq-rate "+fq
	}
	return ld
}

// parseToolSize reads an iperf size (an integer with an optional K, M, G
// suffix, in units of 1024).
func parseToolSize(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	mult := 1
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > math.MaxInt32/mult {
		return 0, false
	}
	return n * mult, true
}
