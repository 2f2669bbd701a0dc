package evaluate

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// mtuSuite is the suite whose DF size sweep answers the path MTU question.
const mtuSuite = "pmtu"

// judgeMTU is a line per path: the largest packet that crossed it with DF
// set, and whether a size the sender's interface allows vanished without
// an error (a black hole: the ICMP "fragmentation needed" never came).
func judgeMTU(rows []suite.Row) []Line {
	var out []Line
	for _, r := range rows {
		l := Line{Scope: r.Connection, Verdict: Unknown}
		p := suite.Fig(r, "path_mtu")
		if p == nil {
			l.Reason = strings.TrimSpace("no size crossed the path; " + rowErrors(r))
			out = append(out, l)
			continue
		}
		l.Key = &Figure{Name: "path_mtu", Value: *p, Unit: "B"}
		l.Figures = fmt.Sprintf("path MTU %.0f B", *p)
		if m := suite.Fig(r, "refused_from"); m != nil {
			l.Figures += fmt.Sprintf(", refused by the sender from %.0f B", *m)
		}
		switch b := suite.Fig(r, "black_hole"); {
		case b == nil:
			l.Verdict = Measured
			l.Reason = "the sweep did not say whether larger sizes were refused"
		case *b > 0:
			l.Verdict = Fails
			l.Reason = "black hole: a size that fits the sender's interface vanished with DF set, and no error came back"
			if s := suite.Fig(r, "black_hole_size"); s != nil {
				l.Reason = fmt.Sprintf("black hole: %.0f B fits the sender's interface but vanished with DF set, and no error came back", *s)
			}
		default:
			l.Verdict = Holds
			l.Reason = "every size up to the sender's interface MTU crossed, or was refused with an error: no black hole"
		}
		out = append(out, l)
	}
	return out
}
