package evaluate

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/contention"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// rowErrors is a row's errors as a reason, "" when it has none.
func rowErrors(r suite.Row) string {
	if len(r.Errors) == 0 {
		return ""
	}
	return "errors: " + strings.Join(r.Errors, "; ")
}

func mbit(v float64) string { return fmt.Sprintf("%.0f Mbit/s", v/1e6) }

// judgeOverlay is a line per baseline connection: its TCP and UDP
// throughput, round trip, and what it costs against node-node (the
// suite's OverheadPct) and, via a Service, against the same pods without
// it (ServiceOverhead).
func judgeOverlay(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		l := Line{Scope: r.Connection, Verdict: Measured}
		var figs []string
		if v := suite.Fig(r, "throughput_bps.receiver"); v != nil {
			figs = append(figs, "TCP "+mbit(*v))
			l.Key = &Figure{Name: "throughput_bps.receiver", Value: *v, Unit: "bit/s"}
		}
		if v := suite.Fig(r, "rtt_ms.p50"); v != nil {
			figs = append(figs, "RR p50 "+suite.FormatMs(*v)+" ms")
		}
		if v := suite.Fig(r, "loss_pct"); v != nil {
			figs = append(figs, fmt.Sprintf("UDP loss %.2f %%", *v))
		}
		l.Figures = strings.Join(figs, ", ")
		switch {
		case r.ServiceOverhead != nil && r.ServiceOverhead.TCPPct != nil:
			l.Reason = serviceReason(*r.ServiceOverhead)
		case r.OverheadPct != nil && *r.OverheadPct < 0:
			l.Reason = fmt.Sprintf("%.1f %% more TCP throughput than node-node", -*r.OverheadPct)
		case r.OverheadPct != nil:
			l.Reason = fmt.Sprintf("%.1f %% less TCP throughput than node-node", *r.OverheadPct)
		case r.Connection == suite.NodeNode:
			l.Reason = "the reference: the nodes' own network"
		default:
			l.Reason = "no node-node row to compare with"
		}
		if l.Key == nil {
			l.Verdict = Unknown
			l.Reason = strings.TrimSpace("no TCP throughput measured; " + rowErrors(r))
		}
		out = append(out, l)
	}
	return out
}

// serviceReason says what the Service costs against the same pods
// without it; a path that measured faster through the Service reads as
// more, not as a negative cost.
func serviceReason(o suite.ServiceOverhead) string {
	pct := *o.TCPPct
	reason := fmt.Sprintf("the Service costs %.1f %% of TCP throughput against the same pods without it", pct)
	if pct < 0 {
		reason = fmt.Sprintf("%.1f %% more TCP throughput through the Service than the same pods without it", -pct)
	}
	if a := o.RRAddedMs; a != nil {
		if *a < 0 {
			reason += fmt.Sprintf("; its round trip %s ms shorter", suite.FormatMs(-*a))
		} else {
			reason += fmt.Sprintf(" and adds %s ms to the round trip", suite.FormatMs(*a))
		}
	}
	return reason
}

// judgeCapacity is a line per path: the capacity the search found, and
// whether its re-test at that rate stayed under the loss threshold.
func judgeCapacity(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		l := Line{Scope: r.Connection, Verdict: Unknown}
		c := suite.Fig(r, "capacity_bps")
		if c == nil {
			l.Reason = strings.TrimSpace("no capacity found; " + rowErrors(r))
			out = append(out, l)
			continue
		}
		l.Key = &Figure{Name: "capacity_bps", Value: *c, Unit: "bit/s"}
		l.Figures = "capacity " + mbit(*c)
		if v := suite.Fig(r, "retest_loss_pct"); v != nil {
			l.Figures += fmt.Sprintf(", re-test loss %.3f %%", *v)
		}
		thr := suite.Fig(r, "loss_threshold_pct")
		switch p := suite.Fig(r, "retest_pass"); {
		case p == nil:
			l.Reason = "not re-tested"
		case *p >= 1:
			l.Verdict = Holds
			l.Reason = "the re-test at the capacity found stayed under the loss threshold"
		default:
			l.Verdict = Fails
			l.Reason = "the re-test at the capacity found lost more than the threshold: the path's capacity varies"
		}
		if thr != nil {
			l.Reason += fmt.Sprintf(" (%g %%)", *thr)
		}
		out = append(out, l)
	}
	return out
}

// qosScope names a qos-priority row's connection and variant.
func qosScope(r suite.Row) string {
	return r.Connection + " · " + r.Labels[qospriority.LabelVariant]
}

// judgeDSCP is a line per connection and variant, from its marked rows:
// did the mark arrive at the receiver (dscp_received against dscp), and
// where was it on the sending node's wire (the suite's wire watch: outer
// and, inside VXLAN, inner header).
func judgeDSCP(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		sent := suite.Fig(r, "dscp")
		if sent == nil || *sent == 0 {
			continue
		}
		l := Line{Scope: qosScope(r) + " · " + r.Labels[qospriority.LabelMarking], Verdict: Unknown}
		got := suite.Fig(r, "dscp_received")
		wire, lost, seen := qospriority.MarkOnWire(r)
		var figs []string
		if got != nil {
			figs = append(figs, fmt.Sprintf("sent %s, received %s", probe.DSCPName(int(*sent)), probe.DSCPName(int(*got))))
			l.Key = &Figure{Name: "dscp_received", Value: *got}
		}
		if v := suite.Fig(r, "wire_dscp.outer"); v != nil {
			w := fmt.Sprintf("wire outer %.0f", *v)
			if in := suite.Fig(r, "wire_dscp.inner"); in != nil {
				w += fmt.Sprintf(", inner %.0f", *in)
			}
			figs = append(figs, w)
		}
		l.Figures = strings.Join(figs, "; ")
		arrived := got != nil && int(*got) == int(*sent)
		switch {
		case got == nil && !seen:
			l.Reason = strings.TrimSpace("the receiver did not report the mark and no wire watch saw the flow; " + rowErrors(r))
		case arrived && seen && lost:
			l.Verdict = Partial
			l.Reason = "the mark arrived at the receiver, but " + wire + ": a queue on the underlay cannot see it"
		case arrived:
			l.Verdict = Holds
			l.Reason = "the mark arrived at the receiver"
			if seen {
				l.Reason += "; " + wire
			}
		case got != nil:
			l.Verdict = Fails
			l.Reason = "the mark did not arrive at the receiver"
			if seen {
				l.Reason += "; " + wire
			}
		default:
			l.Reason = wire + "; the receiver did not report the mark"
		}
		out = append(out, l)
	}
	return out
}

// judgePriority is a line per connection and variant: qos-priority's own
// verdict (protected, partial, none) on the EF foreground's p99 against
// the unmarked one's.
func judgePriority(rows []suite.Row) []Line {
	var out []Line
	for _, v := range qospriority.Verdicts(rows) {
		l := Line{Scope: v.Connection + " · " + v.Variant, Reason: v.Text}
		switch v.Effect {
		case "protected":
			l.Verdict = Holds
		case "partial":
			l.Verdict = Partial
		case "none":
			l.Verdict = Fails
		default:
			l.Verdict = Unknown
		}
		if v.Factor > 0 {
			l.Figures = fmt.Sprintf("p99 unmarked / EF %.1f×", v.Factor)
			l.Key = &Figure{Name: "p99_factor", Value: v.Factor, Unit: "x"}
		}
		out = append(out, l)
	}
	return out
}

// limitGroups groups a shaping or policing run's rows by placement and
// variant, in order, as shaping.SetLimitVerdicts judges them.
func limitGroups(rows []suite.Row) ([]string, map[string][]suite.Row) {
	var order []string
	by := map[string][]suite.Row{}
	for _, r := range rows {
		k := r.Labels[shaping.LabelPlacement]
		if v := r.Labels["variant"]; v != "" {
			k = strings.TrimSpace(k + " · " + v)
		}
		k = strings.TrimPrefix(k, " · ")
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	return order, by
}

// judgeLimits is a line per placement (and variant): the suite's limit
// verdict (shaping.LimitHeld, the text of its verdict label), with the
// worst overshoot and the slowest time to conform.
func judgeLimits(rows []suite.Row) []Line {
	order, by := limitGroups(rows)
	var out []Line
	for _, k := range order {
		grp := by[k]
		l := Line{Scope: k, Verdict: Unknown}
		if len(grp) > 0 {
			l.Reason = grp[0].Labels[shaping.LabelVerdict]
		}
		off, measured := shaping.LimitHeld(grp)
		switch {
		case measured == 0:
			if l.Reason == "" {
				l.Reason = "no flow measured"
			}
			for _, r := range grp {
				if e := rowErrors(r); e != "" {
					l.Reason += "; " + e
					break
				}
			}
			if strings.Contains(l.Reason, "not measured") {
				l.Verdict = NotAsked
			}
		case off == 0:
			l.Verdict = Holds
		case off < measured:
			l.Verdict = Partial
		default:
			l.Verdict = Fails
		}
		var over, conform, loss *float64
		for _, r := range grp {
			if v := suite.Fig(r, "overshoot_pct"); v != nil && (over == nil || *v > *over) {
				over = v
			}
			if v := suite.Fig(r, "time_to_conform_s"); v != nil && (conform == nil || *v > *conform) {
				conform = v
			}
			if v := suite.Fig(r, "loss_pct"); v != nil && (loss == nil || *v > *loss) {
				loss = v
			}
		}
		var figs []string
		if measured > 0 {
			figs = append(figs, fmt.Sprintf("%d of %d flows within %g %%", measured-off, measured, shaping.HoldTolerancePct))
		}
		if over != nil {
			figs = append(figs, fmt.Sprintf("overshoot up to %.0f %%", *over))
			l.Key = &Figure{Name: "overshoot_pct", Value: *over, Unit: "%"}
		}
		if conform != nil {
			figs = append(figs, fmt.Sprintf("conformed within %.1f s", *conform))
		}
		if loss != nil {
			figs = append(figs, fmt.Sprintf("UDP loss up to %.1f %%", *loss))
		}
		l.Figures = strings.Join(figs, ", ")
		out = append(out, l)
	}
	return out
}

// judgeIngress is judgeLimits on policing's rows: a line per placement
// and variant (the police action, the CNI's ingress limit), with the loss
// the limit causes.
func judgeIngress(rows []suite.Row) []Line { return judgeLimits(rows) }

// judgeFairness is a line per contention case (placement and protocol):
// whether every sender backed off (the suite's backed_off), with Jain's
// fairness index and the total against the bottleneck.
func judgeFairness(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		if r.Labels[contention.LabelFlow] != contention.FlowAll {
			continue
		}
		l := Line{Scope: r.Labels[contention.LabelPlacement] + " · " + r.Labels[contention.LabelProto], Verdict: Unknown}
		var figs []string
		if f := suite.Fig(r, contention.FigFairness); f != nil {
			figs = append(figs, fmt.Sprintf("Jain's fairness %.3f", *f))
			l.Key = &Figure{Name: contention.FigFairness, Value: *f}
		}
		if t := suite.Fig(r, contention.FigTotal); t != nil {
			figs = append(figs, "total "+mbit(*t))
		}
		if b := r.Labels[contention.LabelBottleneck]; b != "" {
			figs = append(figs, "through "+b)
		}
		l.Figures = strings.Join(figs, ", ")
		switch r.Labels[contention.LabelBackedOff] {
		case "yes":
			l.Verdict = Holds
			l.Reason = "every sender backed off to what its flow delivered"
		case "no":
			l.Verdict = Fails
			l.Reason = "the senders kept sending more than their flows delivered"
		case "in some repetitions":
			l.Verdict = Partial
			l.Reason = "the senders backed off in some repetitions only"
		default:
			l.Reason = strings.TrimSpace("back-off not measured; " + rowErrors(r))
		}
		out = append(out, l)
	}
	return out
}
