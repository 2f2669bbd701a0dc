package evaluate

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/netpol"
)

// judgePolicy reads the netpol suite's rows: a line per count and variant
// (TCP throughput, rr and crr against no policy; the no-policy row is the
// reference), a line for the deny made mid-test (established connections
// kept or cut, new ones refused or not) and a line for the enforcement
// latency of a deny and an allow.
func judgePolicy(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		switch n := r.Labels[netpol.LabelPolicies]; n {
		case netpol.PoliciesDeny:
			out = append(out, judgeDeny(r))
		case netpol.PoliciesEnforce:
			out = append(out, judgeEnforce(r))
		default:
			out = append(out, judgeCost(r, n))
		}
	}
	return out
}

// judgeCost is a cost row's line: its figures against no policy.
func judgeCost(r suite.Row, n string) Line {
	l := Line{Scope: "no policy", Verdict: Measured}
	if n != "0" {
		l.Scope = n + " policies · " + r.Labels[netpol.LabelSelect]
	}
	var figs, vs []string
	for _, f := range []struct{ name, fig, vsNone string }{
		{"TCP", netpol.FigThroughput, netpol.FigThroughputVsNone},
		{"rr", netpol.FigRR, netpol.FigRRVsNone},
		{"crr", netpol.FigCRR, netpol.FigCRRVsNone},
	} {
		v := suite.Fig(r, f.fig)
		if v == nil {
			continue
		}
		if f.fig == netpol.FigThroughput {
			figs = append(figs, "TCP "+mbit(*v))
		} else {
			figs = append(figs, fmt.Sprintf("%s %.0f/s", f.name, *v))
		}
		if p := suite.Fig(r, f.vsNone); p != nil {
			vs = append(vs, fmt.Sprintf("%s %.1f %%", f.name, *p))
			if f.fig == netpol.FigCRR {
				l.Key = &Figure{Name: netpol.FigCRRVsNone, Value: *p, Unit: "%"}
			}
		}
	}
	l.Figures = strings.Join(figs, ", ")
	switch {
	case len(figs) == 0:
		l.Verdict = Unknown
		l.Reason = strings.TrimSpace("nothing measured; " + rowErrors(r))
	case n == "0":
		l.Reason = "the reference: the pair with no policy"
	case len(vs) == 0:
		l.Reason = "no no-policy figure to compare with"
	default:
		what := "selecting the pair (each allowing its peer)"
		if r.Labels[netpol.LabelSelect] == netpol.SelectOther {
			what = "selecting no pod of the run"
		}
		l.Reason = fmt.Sprintf("with %s policies %s, of the no-policy figure: %s", n, what, strings.Join(vs, ", "))
	}
	return l
}

// judgeDeny is the deny row's line: new connections refused after the
// deny is the policy enforced; whether the established one was kept is
// the CNI's choice (NetworkPolicy leaves it open), reported as measured.
func judgeDeny(r suite.Row) Line {
	est, fresh := r.Labels[netpol.LabelEstablished], r.Labels[netpol.LabelNew]
	l := Line{Scope: "deny mid-test", Figures: fmt.Sprintf("established %s, new %s", est, fresh)}
	switch {
	case fresh == "refused":
		l.Verdict = Measured
		l.Reason = "the deny refused new connections; the established one was " + est
	case fresh == "allowed":
		l.Verdict = Fails
		l.Reason = "the deny refused no new connection: it was not enforced"
	case strings.HasPrefix(fresh, "refused in"):
		l.Verdict = Partial
		l.Reason = "the deny refused new connections in some repetitions only (" + fresh + "); the established one was " + est
	default:
		l.Verdict = Unknown
		l.Reason = strings.TrimSpace("the deny's effect was not measured; " + rowErrors(r))
	}
	return l
}

// judgeEnforce is the enforcement row's line: p50 and p99 of the time
// from asking for a deny (an allow) to the first connect it changed.
func judgeEnforce(r suite.Row) Line {
	l := Line{Scope: "enforcement", Verdict: Measured}
	var figs []string
	for _, f := range []struct{ name, p50, p99 string }{
		{"deny", netpol.FigDenyP50, netpol.FigDenyP99}, {"allow", netpol.FigAllowP50, netpol.FigAllowP99},
	} {
		p50, p99 := suite.Fig(r, f.p50), suite.Fig(r, f.p99)
		if p50 == nil || p99 == nil {
			continue
		}
		figs = append(figs, fmt.Sprintf("%s p50 %.1f ms, p99 %.1f ms", f.name, *p50, *p99))
		if l.Key == nil {
			l.Key = &Figure{Name: f.p50, Value: *p50, Unit: "ms"}
		}
	}
	l.Figures = strings.Join(figs, "; ")
	l.Reason = fmt.Sprintf("from asking for the policy to the first connect it changed, over %d samples", r.Repetitions)
	if len(figs) == 0 {
		l.Verdict = Unknown
		l.Reason = "no enforcement latency measured"
	}
	if e := rowErrors(r); e != "" {
		l.Reason += "; " + e
	}
	return l
}
