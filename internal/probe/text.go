package probe

import (
	"fmt"
	"strings"
)

// FormatInterval writes one interval report line, as iperf3 does.
func FormatInterval(iv Interval) string {
	if iv.Transactions != nil {
		s := fmt.Sprintf("[SUM] %6.2f-%-6.2f sec  %9d trans  %10.1f trans/s", iv.StartS, iv.EndS, *iv.Transactions, deref(iv.TransactionsPerS))
		if iv.RTTP50ms != nil && iv.RTTP99ms != nil {
			s += fmt.Sprintf("  rtt p50 %.3f ms  p99 %.3f ms", *iv.RTTP50ms, *iv.RTTP99ms)
		}
		if iv.LossPct != nil && *iv.LossPct > 0 {
			s += fmt.Sprintf("  %.3g%% loss", *iv.LossPct)
		}
		return s
	}
	s := fmt.Sprintf("[SUM] %6.2f-%-6.2f sec  %12s  %16s", iv.StartS, iv.EndS, FormatBytes(iv.Bytes), FormatRate(iv.ThroughputBps))
	if iv.Retransmits != nil {
		s += fmt.Sprintf("  %5d retr", *iv.Retransmits)
	}
	if iv.JitterMs != nil {
		s += fmt.Sprintf("  %8.3f ms jitter", *iv.JitterMs)
	}
	if iv.LossPct != nil {
		s += fmt.Sprintf("  %.3g%% loss", *iv.LossPct)
	}
	return s
}

// FormatHop writes one traceroute hop as traceroute does (its TTL, the
// address that answered or *, each probe's round trip) and the DSCP the
// hop saw, without a line end.
func FormatHop(h Hop) string {
	addr := h.Addr
	if addr == "" {
		addr = "*"
	}
	s := fmt.Sprintf("  %2d  %-39s", h.TTL, addr)
	for _, v := range h.RTTms {
		s += fmt.Sprintf(" %.3f ms", v)
	}
	if h.DSCPSeen != nil {
		s += fmt.Sprintf("  dscp %s", DSCPName(*h.DSCPSeen))
	}
	return s
}

// FormatSummary writes a result as a human summary: iperf3-like for
// throughput, ping-like for round trips, traceroute-like for paths.
func FormatSummary(r *Result) string {
	var b strings.Builder
	mark := "unmarked"
	if r.TOS != 0 {
		mark = fmt.Sprintf("DSCP %s (TOS 0x%02x)", DSCPName(r.DSCP), r.TOS)
	}
	fmt.Fprintf(&b, "%s %s → %s, %s, %.2f s\n", r.Kind, r.Src, r.Dst, mark, r.DurationS)
	if r.ThroughputBps != nil && r.Bytes != nil {
		fmt.Fprintf(&b, "  sender:   %12s  %16s", FormatBytes(r.Bytes.Sender), FormatRate(r.ThroughputBps.Sender))
		if r.Retransmits != nil {
			fmt.Fprintf(&b, "  %d retransmits", *r.Retransmits)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "  receiver: %12s  %16s\n", FormatBytes(r.Bytes.Receiver), FormatRate(r.ThroughputBps.Receiver))
	}
	if r.SRTTms != nil {
		fmt.Fprintf(&b, "  smoothed rtt: %.3f ms\n", *r.SRTTms)
	}
	if r.CPUPct != nil {
		fmt.Fprintf(&b, "  cpu: sender %.1f%%, receiver %.1f%%\n", r.CPUPct.Sender, r.CPUPct.Receiver)
	}
	if p := r.Packets; p != nil {
		fmt.Fprintf(&b, "  packets: %d sent, %d received, %d lost", p.Sent, p.Received, p.Lost)
		if r.LossPct != nil {
			fmt.Fprintf(&b, " (%.4g%%)", *r.LossPct)
		}
		fmt.Fprintf(&b, ", %d out of order, %d duplicate\n", p.OutOfOrder, p.Duplicate)
	}
	if r.SendMode != "" || r.RecvMode != "" {
		fmt.Fprintf(&b, "  send_mode %s, recv_mode %s", r.SendMode, r.RecvMode)
		if r.BurstDatagrams != nil {
			fmt.Fprintf(&b, ", at most %d datagrams per system call", *r.BurstDatagrams)
		}
		b.WriteString("\n")
	}
	if r.PPS != nil {
		fmt.Fprintf(&b, "  rate: %.0f packets/s\n", *r.PPS)
	}
	if r.JitterMs != nil {
		fmt.Fprintf(&b, "  jitter: %.3f ms\n", *r.JitterMs)
	}
	if r.LatencyMs != nil {
		fmt.Fprintf(&b, "  one-way latency ms: %s\n", formatSummaryLine(r.LatencyMs))
	}
	if c := r.Clock; c != nil {
		if c.SameClock {
			b.WriteString("  clock: both ends share one clock; one-way figures are exact\n")
		} else {
			fmt.Fprintf(&b, "  clock: far end offset %.3f ms ± %.3f ms; one-way figures carry that error\n", c.OffsetMs, c.ErrorBoundMs)
		}
	}
	if r.RTTms != nil {
		if r.LossPct != nil && r.Packets == nil {
			fmt.Fprintf(&b, "  %d replies, %.4g%% loss\n", r.RTTms.Count, *r.LossPct)
		}
		fmt.Fprintf(&b, "  rtt ms: %s\n", formatSummaryLine(r.RTTms))
	}
	for _, d := range []struct {
		name string
		dir  *Direction
	}{{"forward", r.Forward}, {"reverse", r.Reverse}} {
		if d.dir == nil {
			continue
		}
		fmt.Fprintf(&b, "  %s:", d.name)
		if d.dir.DelayMs != nil {
			fmt.Fprintf(&b, " one-way ms p50 %.3f (min %.3f, max %.3f)", d.dir.DelayMs.P50, d.dir.DelayMs.Min, d.dir.DelayMs.Max)
			if d.dir.ErrorBoundMs != nil {
				fmt.Fprintf(&b, " ± %.3f", *d.dir.ErrorBoundMs)
			}
		}
		if d.dir.LossPct != nil && d.dir.Lost != nil {
			fmt.Fprintf(&b, ", %d lost (%.4g%%)", *d.dir.Lost, *d.dir.LossPct)
		}
		if d.dir.DSCPReceived != nil {
			fmt.Fprintf(&b, ", arrived with DSCP %s", DSCPName(*d.dir.DSCPReceived))
		}
		b.WriteString("\n")
	}
	if r.AppRTTms != nil {
		fmt.Fprintf(&b, "  app rtt ms: %s\n", formatSummaryLine(r.AppRTTms))
	}
	if r.TransactionsPerS != nil {
		fmt.Fprintf(&b, "  transactions: %.0f/s\n", *r.TransactionsPerS)
	}
	changed := false
	for _, h := range r.Hops {
		b.WriteString(FormatHop(h))
		if h.DSCPSeen != nil {
			if *h.DSCPSeen != r.DSCP && !changed {
				changed = true
				fmt.Fprintf(&b, "  <-- DSCP changed before this hop (sent %s)", DSCPName(r.DSCP))
			}
		}
		b.WriteString("\n")
	}
	if r.DSCPReceived != nil {
		survived := "changed on the way"
		if r.DSCPSurvived != nil && *r.DSCPSurvived {
			survived = "survived"
		}
		fmt.Fprintf(&b, "  dscp on arrival: %s (%s)\n", DSCPName(*r.DSCPReceived), survived)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

func formatSummaryLine(s *Summary) string {
	return fmt.Sprintf("min/avg/max/stdev = %.3f/%.3f/%.3f/%.3f, p50 %.3f, p90 %.3f, p99 %.3f (n=%d)",
		s.Min, s.Avg, s.Max, s.Stdev, s.P50, s.P90, s.P99, s.Count)
}

func deref(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}
