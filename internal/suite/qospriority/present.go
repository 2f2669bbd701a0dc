package qospriority

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/cnperf/cnperf/internal/suite"
)

// WriteTable writes the matrix (variant × marking) and the verdicts; with
// both placements, the connection is named on each row and verdict.
func (Suite) WriteTable(w io.Writer, rows []suite.Row) error {
	conns := map[string]bool{}
	for _, r := range rows {
		conns[r.Connection] = true
	}
	several := len(conns) > 1
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if several {
		fmt.Fprint(tw, "connection\t")
	}
	fmt.Fprintln(tw, "backend\tvariant\tmarking\tlat min\tavg\tp50\tp99\tmax\tstdev ms\tjitter ms\tloss %\tpps\tping avg\tping p99 ms\tbackground Mbit/s\t")
	for _, r := range rows {
		f := func(name string) string {
			if p := suite.Fig(r, name); p != nil {
				return suite.FormatMs(*p)
			}
			return "-"
		}
		bg := "-"
		if p := suite.Fig(r, "background_throughput_bps"); p != nil {
			bg = fmt.Sprintf("%.0f", *p/1e6)
		}
		if several {
			fmt.Fprintf(tw, "%s\t", r.Connection)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Backend, r.Labels[LabelVariant], r.Labels[LabelMarking],
			f("latency_ms.min"), f("latency_ms.avg"), f("latency_ms.p50"), f("latency_ms.p99"), f("latency_ms.max"), f("latency_ms.stdev"),
			suite.FormatOpt(suite.Fig(r, "jitter_ms"), "%.3f"), suite.FormatOpt(suite.Fig(r, "loss_pct"), "%.2f"), suite.FormatOpt(suite.Fig(r, "pps"), "%.0f"),
			f("rtt_ms.avg"), f("rtt_ms.p99"), bg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "error %s/%s: %s\n", r.Labels[LabelVariant], r.Labels[LabelMarking], e)
		}
	}
	for _, v := range Verdicts(rows) {
		name := v.Variant
		if several {
			name = fmt.Sprintf("%s (%s)", v.Variant, v.Connection)
		}
		if _, err := fmt.Fprintf(w, "%-15s %s\n", name+":", v.Text); err != nil {
			return err
		}
	}
	return nil
}

// Presentation implements suite.Presenter: rows named by variant and
// marking, the verdict a note per variant, and the variant × marking
// matrices of the foreground's delay and the ping's round trip.
func (Suite) Presentation() suite.Presentation {
	matrix := func(metric, label string) suite.MatrixHint {
		return suite.MatrixHint{Title: fmt.Sprintf("qos-priority: %s by variant and marking", label), Metric: metric, Label: label,
			RowKey: LabelVariant, RowTitle: "variant (where the queue is)", ColKey: LabelMarking, ColTitle: "foreground marking"}
	}
	return suite.Presentation{LabelOrder: []string{LabelVariant, LabelMarking}, Conclusion: LabelVerdict, ConclusionOf: LabelVariant,
		Matrices: []suite.MatrixHint{matrix("latency_ms.p99", "foreground one-way delay p99"), matrix("rtt_ms.avg", "ping round trip avg")}}
}
