package baseline

import "github.com/cnperf/cnperf/internal/suite"

// Presentation implements suite.Presenter: the source study's table per
// backend and, when the rows span several backends, the backends side by
// side.
func (Suite) Presentation() suite.Presentation { return Presentation(2) }

// Presentation is the baseline's tables: per backend, the source study's
// Table 2 (communication mode, TCP bandwidth, average RTT) with UDP, the
// rr RTT, STAMP (when measured) and the overhead against node-node beside
// them; then, when the rows span at least compareFrom backends, the
// comparison of the Calico and Flannel studies (bitrate, transfer and CPU
// at both ends per connection, a column per backend).
func Presentation(compareFrom int) suite.Presentation {
	fig := func(head, metric string, div float64, format string) suite.Column {
		return suite.Column{Head: head, Metric: metric, Div: div, Format: format, Spread: true}
	}
	stamp := func(c suite.Column) suite.Column {
		c.Optional = true
		return c
	}
	return suite.Presentation{Tables: []suite.Table{
		{PerBackend: true, Columns: []suite.Column{
			{Head: "CONNECTION", Field: suite.FieldConnection},
			{Head: "SRC -> DST", Field: suite.FieldPath},
			fig("TCP Mbit/s", "throughput_bps.receiver", 1e6, "%.0f"),
			fig("PING RTT ms", "ping.rtt_ms.avg", 1, "%.3f"),
			fig("RR RTT ms", "rtt_ms.avg", 1, "%.3f"),
			fig("UDP Mbit/s", "udp.throughput_bps.receiver", 1e6, "%.0f"),
			fig("UDP LOSS %", "loss_pct", 1, "%.2f"),
			stamp(fig("STAMP RTT ms", "stamp.rtt_ms.p50", 1, "%.3f")),
			stamp(fig("FWD ms", "stamp.forward.delay_ms.p50", 1, "%.3f")),
			stamp(fig("REV ms", "stamp.reverse.delay_ms.p50", 1, "%.3f")),
			stamp(fig("FWD LOSS %", "stamp.forward.loss_pct", 1, "%.2f")),
			stamp(fig("REV LOSS %", "stamp.reverse.loss_pct", 1, "%.2f")),
			stamp(fig("DSCP FWD", "stamp.forward.dscp_received", 1, "%.0f")),
			stamp(fig("DSCP REV", "stamp.reverse.dscp_received", 1, "%.0f")),
			{Head: "VS NODE-NODE", Field: suite.FieldOverhead},
		}},
		{Title: "backends compared", MinBackends: compareFrom, Pivot: []string{
			"throughput_bps.sender", "bytes.sender", "cpu_pct.sender",
			"throughput_bps.receiver", "bytes.receiver", "cpu_pct.receiver",
		}},
	}}
}
