package external

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
)

// iputils ping output (ping -n), line by line.
var (
	// PING 198.18.0.2 (198.18.0.2) [from 198.18.0.1 eth0: ]56(84) bytes of data.
	// PING fd63:6e70::2(fd63:6e70::2) 56 data bytes
	pingHeaderRE = regexp.MustCompile(`^PING (\S+?) ?\(([^)]+)\)(?: from \S+(?: \S+)?:)? (?:\d+\(\d+\) bytes of data|\d+ data bytes)\.?$`)
	// 64 bytes from 198.18.0.2: icmp_seq=1 ttl=64 time=0.373 ms [(DUP!)]
	pingReplyRE = regexp.MustCompile(`^\d+ bytes from ([^ ]+?):? icmp_seq=(\d+) ttl=(\d+) time=([0-9.]+) ms( \(DUP!\))?$`)
	// From 198.18.0.1 icmp_seq=1 Destination Host Unreachable
	pingFromRE  = regexp.MustCompile(`^From (\S+?):? icmp_seq=(\d+) (.+)$`)
	pingStatsRE = regexp.MustCompile(`^--- (\S+) ping statistics ---$`)
	// 10 packets transmitted, 10 received, [+1 duplicates, ][+3 errors, ]0% packet loss, time 1833ms
	pingCountRE = regexp.MustCompile(`^(\d+) packets transmitted, (\d+) received(?:, \+(\d+) duplicates)?(?:, \+(\d+) errors)?, ([0-9.]+)% packet loss(?:, time (\d+)ms)?$`)
	// rtt min/avg/max/mdev = 0.049/0.087/0.373/0.095 ms[, pipe 2][, ipg/ewma ...]
	pingRTTRE = regexp.MustCompile(`^rtt min/avg/max/mdev = ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms(?:, .*)?$`)
)

// ParsePing reads iputils ping's text output (as run with -n) into a Result
// with Kind "ping" and Tool "ping". rtt_ms is computed from the per-reply
// times (duplicates excluded), so it carries percentiles ping does not
// print; ping's own summary line is cross-checked against them (count,
// min and max) and a mismatch is an error. loss_pct and packets come from
// ping's statistics line. Lines the parser does not know are an error.
func ParsePing(out string) (*probe.Result, error) {
	r := &probe.Result{Kind: "ping", Tool: ToolPing, Raw: out}
	var rtts []float64
	var dups, errLines int64
	var haveHeader, haveCounts bool
	var summary []float64
	var transmitted, received int64
	var lossPct float64
	inStats := false
	for i, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r ")
		if line == "" {
			continue
		}
		fail := func(why string) error {
			return fmt.Errorf("ping output line %d %q: %s", i+1, line, why)
		}
		switch {
		case !haveHeader:
			m := pingHeaderRE.FindStringSubmatch(line)
			if m == nil {
				return nil, fail("want the PING header line first")
			}
			haveHeader = true
			r.Dst = m[2]
		case inStats:
			if m := pingCountRE.FindStringSubmatch(line); m != nil && !haveCounts {
				haveCounts = true
				transmitted, _ = strconv.ParseInt(m[1], 10, 64)
				received, _ = strconv.ParseInt(m[2], 10, 64)
				lossPct, _ = strconv.ParseFloat(m[5], 64)
				if m[6] != "" {
					ms, _ := strconv.ParseFloat(m[6], 64)
					r.DurationS = ms / 1000
				}
				continue
			}
			if m := pingRTTRE.FindStringSubmatch(line); m != nil && haveCounts && summary == nil {
				for _, s := range m[1:5] {
					v, err := strconv.ParseFloat(s, 64)
					if err != nil {
						return nil, fail(err.Error())
					}
					summary = append(summary, v)
				}
				continue
			}
			return nil, fail("not a ping statistics line")
		default:
			if m := pingReplyRE.FindStringSubmatch(line); m != nil {
				v, err := strconv.ParseFloat(m[4], 64)
				if err != nil || v < 0 {
					return nil, fail("bad time")
				}
				if m[5] != "" {
					dups++
					continue
				}
				rtts = append(rtts, v)
				continue
			}
			if pingFromRE.MatchString(line) {
				errLines++
				continue
			}
			if pingStatsRE.MatchString(line) {
				inStats = true
				continue
			}
			return nil, fail("not a ping reply, error or statistics line")
		}
	}
	if !haveHeader {
		return nil, fmt.Errorf("ping output: empty (no PING header)")
	}
	if !haveCounts {
		return nil, fmt.Errorf("ping output: no statistics line (ping interrupted?)")
	}
	if int64(len(rtts)) != received {
		return nil, fmt.Errorf("ping output: %d reply lines but the statistics say %d received", len(rtts), received)
	}
	if received > 0 {
		if summary == nil {
			return nil, fmt.Errorf("ping output: %d received but no rtt min/avg/max/mdev line", received)
		}
		sum := stats.Summarize(rtts)
		if !closeTo(sum.Min, summary[0]) || !closeTo(sum.Max, summary[2]) || !closeTo(sum.Avg, summary[1]) {
			return nil, fmt.Errorf("ping output: per-reply times give min/avg/max %.3f/%.3f/%.3f but ping's summary says %.3f/%.3f/%.3f",
				sum.Min, sum.Avg, sum.Max, summary[0], summary[1], summary[2])
		}
		r.RTTms = &sum
	}
	lost := transmitted - received
	if lost < 0 {
		lost = 0
	}
	r.Packets = &probe.PacketCounts{Sent: transmitted, Received: received, Lost: lost, Duplicate: dups}
	if transmitted > 0 {
		r.LossPct = probe.Float(100 * float64(lost) / float64(transmitted))
	} else {
		r.LossPct = probe.Float(lossPct)
	}
	if errLines > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d ICMP error replies (e.g. destination unreachable)", errLines))
	}
	return r, nil
}

// closeTo compares a figure computed from ping's per-reply times (printed
// with 3 decimals, or fewer above 100 ms) with ping's own summary.
func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= 0.0015+0.005*math.Abs(b)
}
