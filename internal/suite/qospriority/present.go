package qospriority

import (
	"fmt"

	"github.com/cnperf/cnperf/internal/suite"
)

// Presentation implements suite.Presenter: rows named by variant and
// marking, a line per row with the foreground's delay, loss and rate, the
// ping's round trip and the background's rate (the connection named when
// there are both placements), the verdict per variant, and the variant ×
// marking matrices of the foreground's delay and the ping's round trip.
func (Suite) Presentation() suite.Presentation {
	matrix := func(metric, label string) suite.MatrixHint {
		return suite.MatrixHint{Title: fmt.Sprintf("qos-priority: %s by variant and marking", label), Metric: metric, Label: label,
			RowKey: LabelVariant, RowTitle: "variant (where the queue is)", ColKey: LabelMarking, ColTitle: "foreground marking"}
	}
	ms := func(head, metric string) suite.Column { return suite.Column{Head: head, Metric: metric} }
	table := suite.Table{Columns: []suite.Column{
		{Head: "connection", Field: suite.FieldConnection, Varying: true},
		{Head: "backend", Field: suite.FieldBackend},
		{Head: "variant", Label: LabelVariant},
		{Head: "marking", Label: LabelMarking},
		ms("lat min", "latency_ms.min"), ms("avg", "latency_ms.avg"), ms("p50", "latency_ms.p50"), ms("p99", "latency_ms.p99"),
		ms("max", "latency_ms.max"), ms("stdev ms", "latency_ms.stdev"),
		{Head: "jitter ms", Metric: "jitter_ms", Format: "%.3f"},
		{Head: "loss %", Metric: "loss_pct", Format: "%.2f"},
		{Head: "pps", Metric: "pps", Format: "%.0f"},
		ms("ping avg", "rtt_ms.avg"), ms("ping p99 ms", "rtt_ms.p99"),
		{Head: "background Mbit/s", Metric: "background_throughput_bps", Div: 1e6, Format: "%.0f"},
	}}
	return suite.Presentation{LabelOrder: []string{LabelVariant, LabelMarking}, Conclusion: LabelVerdict, ConclusionOf: LabelVariant,
		Tables:   []suite.Table{table},
		Matrices: []suite.MatrixHint{matrix("latency_ms.p99", "foreground one-way delay p99"), matrix("rtt_ms.avg", "ping round trip avg")}}
}
