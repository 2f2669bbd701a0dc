package qospriority

import (
	"fmt"
	"math"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Verdict thresholds: a queue "builds" when the unmarked foreground's p99
// is at least QueueingMs; a mark "protects" when it cuts p99 by at least
// ProtectFactor, and has some effect from PartialFactor.
const (
	QueueingMs    = 1.0
	ProtectFactor = 10.0
	PartialFactor = 2.0
)

// Verdict is the one-line conclusion for a variant.
type Verdict struct {
	Variant string `json:"variant"`
	// Connection is the rows' connection (the placement: pod-pod same
	// node or cross node).
	Connection string `json:"connection,omitempty"`
	// Effect is "protected", "partial", "none" or "unknown".
	Effect string `json:"effect"`
	// Factor is the unmarked p99 over the best marked p99 (0 if unknown).
	Factor float64 `json:"factor,omitempty"`
	Text   string  `json:"verdict"`
}

// Verdicts computes one verdict per connection (placement) and variant
// from its rows: for each marked foreground, the p99 one-way latency of
// the unmarked foreground that ran beside it over its own; the best of
// these decides. The verdict also says whether that flow's marks arrived
// (its dscp_received), when measured.
func Verdicts(rows []suite.Row) []Verdict {
	type cv struct{ conn, variant string }
	var order []cv
	by := map[cv][]suite.Row{}
	for _, r := range rows {
		k := cv{r.Connection, r.Labels[LabelVariant]}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	out := make([]Verdict, 0, len(order))
	for _, k := range order {
		v := verdictFor(k.variant, by[k])
		v.Connection = k.conn
		out = append(out, v)
	}
	return out
}

// arrival says whether a marked row's marks arrived: the DSCP the
// receiver saw against the one sent ("" when not measured).
func arrival(r suite.Row) string {
	got := suite.Fig(r, "dscp_received")
	sent := suite.Fig(r, "dscp")
	if got == nil || sent == nil {
		return ""
	}
	name := r.Labels[LabelMarking]
	if int(*got) == int(*sent) {
		return fmt.Sprintf("; the marks arrived (%s received as %s)", name, probe.DSCPName(int(*got)))
	}
	return fmt.Sprintf("; the marks did not arrive (%s sent, %s received)", name, probe.DSCPName(int(*got)))
}

func verdictFor(variant string, rows []suite.Row) (v Verdict) {
	v = Verdict{Variant: variant, Effect: "unknown"}
	// Each marked row carries the p99 of the unmarked flow that ran beside
	// it; without one, the unmarked row's own p99 is the reference.
	var unmarked *float64
	for _, r := range rows {
		if r.Median["tos"] == 0 {
			unmarked = suite.Fig(r, "latency_ms.p99")
		}
	}
	var best *suite.Row
	var bestB, bestM float64
	for i := range rows {
		r := &rows[i]
		m := suite.Fig(*r, "latency_ms.p99")
		if r.Median["tos"] == 0 || m == nil {
			continue
		}
		b := suite.Fig(*r, "reference_latency_ms.p99")
		if b == nil {
			b = unmarked
		}
		if b == nil {
			continue
		}
		if f := *b / math.Max(*m, 1e-6); best == nil || f > v.Factor {
			best, bestB, bestM, v.Factor = r, *b, *m, f
		}
	}
	switch {
	case best == nil && unmarked == nil:
		v.Text = "unknown: no unmarked foreground measured to compare with"
		return v
	case best == nil:
		v.Text = fmt.Sprintf("unknown: no marked foreground measured (unmarked p99 %s ms)", suite.FormatMs(*unmarked))
		return v
	}
	b, m, name := bestB, bestM, best.Labels[LabelMarking]
	where := "where the qdisc sits"
	if variant == VariantNone || variant == VariantAsIs {
		where = "on the path as it is"
	}
	defer func() { v.Text += arrival(*best) }()
	// Where the mark was on the sending node's wire, when a watch saw it.
	wire, lost, seen := wireNote(*best)
	switch {
	case b < QueueingMs:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: no queue builds %s (p99 unmarked %s ms, %s %s ms)", where, suite.FormatMs(b), name, suite.FormatMs(m))
	case v.Factor >= ProtectFactor:
		v.Effect = "protected"
		v.Text = fmt.Sprintf("priority protected the marked flow (%s): p99 %s ms → %s ms", name, suite.FormatMs(b), suite.FormatMs(m))
	case v.Factor >= PartialFactor:
		v.Effect = "partial"
		v.Text = fmt.Sprintf("partial: %s cut p99 %.1f× (%s ms → %s ms), less than the %g× of a priority queue", name, v.Factor, suite.FormatMs(b), suite.FormatMs(m), ProtectFactor)
	case seen && lost:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: %s, so a queue on the underlay cannot see it (p99 unmarked %s ms, %s %s ms)", wire, suite.FormatMs(b), name, suite.FormatMs(m))
		return v
	case seen:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: mark on the wire but no queue honoured it (%s; p99 unmarked %s ms, %s %s ms)", wireOuter(*best), suite.FormatMs(b), name, suite.FormatMs(m))
		return v
	default:
		v.Effect = "none"
		v.Text = fmt.Sprintf("no effect: the queue where packets wait ignores the mark (p99 unmarked %s ms, %s %s ms)", suite.FormatMs(b), name, suite.FormatMs(m))
	}
	if seen {
		v.Text += "; " + wire
	}
	return v
}
