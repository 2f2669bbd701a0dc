package shaping

import (
	"fmt"
	"math"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// HoldTolerancePct: a limit holds when every flow's steady state is
// within this much of the rate it should get (the goodput the limit
// allows, or what a flow below the limit offered).
const HoldTolerancePct = 5.0

// SetLimitVerdicts labels the rows of limited flows with a verdict per
// placement and, when the rows carry one, variant (policing's police and
// cni-ingress), from the rows' own figures: "limit held" when every
// flow's steady state is within HoldTolerancePct of its expected rate,
// "limit not held" naming the flow furthest off otherwise; either way with
// the slowest time to conform and the TCP flows' retransmissions, the
// thesis's reason to prefer shaping to policing (seed 004, §7). Rows that
// already have a verdict (policing's unsupported rows) are left alone.
func SetLimitVerdicts(rows []suite.Row) {
	type group struct{ placement, variant string }
	var order []group
	by := map[group][]int{}
	for i, r := range rows {
		if r.Labels[LabelVerdict] != "" {
			continue
		}
		g := group{r.Labels[LabelPlacement], r.Labels["variant"]}
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], i)
	}
	for _, g := range order {
		var grp []suite.Row
		for _, i := range by[g] {
			grp = append(grp, rows[i])
		}
		text := LimitVerdict(grp)
		if g.variant != "" {
			text = g.variant + ": " + text
		}
		for _, i := range by[g] {
			if rows[i].Labels == nil {
				rows[i].Labels = map[string]string{}
			}
			rows[i].Labels[LabelVerdict] = text
		}
	}
}

// LimitVerdict is the verdict on one placement's rows.
func LimitVerdict(rows []suite.Row) string {
	var worst *suite.Row
	worstErr, measured, off := 0.0, 0, 0
	conform, never := 0.0, []string{}
	retrans, tcp := 0.0, false
	for i := range rows {
		r := &rows[i]
		e := suite.Fig(*r, "steady_state_error_pct")
		if e == nil {
			continue
		}
		measured++
		if offLimit(*e) {
			off++
		}
		if worst == nil || math.Abs(*e) > math.Abs(worstErr) {
			worst, worstErr = r, *e
		}
		if c := suite.Fig(*r, "time_to_conform_s"); c != nil {
			conform = math.Max(conform, *c)
		} else {
			never = append(never, flowName(*r))
		}
		if n := suite.Fig(*r, "retransmits"); n != nil {
			retrans += *n
			tcp = true
		}
	}
	if measured == 0 {
		return "unknown: no flow measured"
	}
	var b strings.Builder
	if off == 0 {
		fmt.Fprintf(&b, "limit held: every flow's steady state within %g %% of what it should get (%d flows; furthest %s, %+.1f %%)",
			HoldTolerancePct, measured, flowName(*worst), worstErr)
	} else {
		fmt.Fprintf(&b, "limit not held: %d of %d flows more than %g %% off what they should get (furthest %s: %.2f Mbit/s against %.2f, %+.1f %%)",
			off, measured, HoldTolerancePct, flowName(*worst), worst.Median["steady_state_bps"]/1e6, worst.Median["expected_bps"]/1e6, worstErr)
	}
	if len(never) == 0 {
		if conform == 0 {
			b.WriteString("; conformed from the first 100 ms")
		} else {
			fmt.Fprintf(&b, "; conformed within %.1f s", conform)
		}
	} else {
		fmt.Fprintf(&b, "; never conformed: %s", strings.Join(never, ", "))
	}
	if tcp {
		fmt.Fprintf(&b, "; TCP retransmits %.0f", retrans)
	}
	return b.String()
}

func flowName(r suite.Row) string {
	return r.Labels[LabelDirection] + "/" + r.Labels[LabelProto] + "/" + r.Labels[LabelLoad]
}

// offLimit reports whether a flow's steady-state error (percent) is
// beyond HoldTolerancePct: the limit did not hold for it.
func offLimit(errPct float64) bool { return math.Abs(errPct) > HoldTolerancePct }

// LimitHeld counts, of rows (one placement's, as LimitVerdict takes
// them), the flows with a steady state (measured) and those off what they
// should get (off): the limit held when measured > 0 and off is 0.
func LimitHeld(rows []suite.Row) (off, measured int) {
	for _, r := range rows {
		if e := suite.Fig(r, "steady_state_error_pct"); e != nil {
			measured++
			if offLimit(*e) {
				off++
			}
		}
	}
	return off, measured
}
