package qospriority

import (
	"fmt"
	"strconv"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Rows implements Suite: one row per variant and marking with the
// foreground's one-way latency, jitter, loss and rate, the marked ping's
// RTT and the background's throughput at the receiver (medians over the
// repetitions), each labelled with its variant's verdict.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	type vr struct {
		placement, variant string
		rep                int
	}
	key := func(o suite.Outcome) vr {
		return vr{o.Step.Labels[labelPlacement], o.Step.Labels[LabelVariant], o.Step.Repeat}
	}
	bg := map[vr]map[string]float64{}
	bgErrs := map[string][]string{}
	var marked []suite.Outcome
	for _, o := range outcomes {
		if o.Step.Measure != MeasureBackground {
			marked = append(marked, o)
			continue
		}
		figs := map[string]float64{}
		if o.Err == "" && o.Result != nil {
			figs, _ = qosFigures(o)
		} else {
			msg := o.Err
			if msg == "" {
				msg = "no result"
			}
			k := key(o)
			bgErrs[k.placement+"\x00"+k.variant] = append(bgErrs[k.placement+"\x00"+k.variant], fmt.Sprintf("background #%d: %s", o.Step.Repeat+1, msg))
		}
		bg[key(o)] = figs
	}
	// The unmarked foreground's p99 beside each marked one (same phase).
	ref := map[vr]float64{}
	for _, o := range marked {
		if o.Step.Measure == MeasureForeground && o.Step.Labels["tos"] == "0" && o.Err == "" && o.Result != nil && o.Result.LatencyMs != nil {
			ref[key(o)] = o.Result.LatencyMs.P99
		}
	}
	rows := suite.LabelRows(marked, []string{labelPlacement, LabelVariant, LabelMarking, "tos"}, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		figs, ser := qosFigures(o)
		if o.Step.Measure == MeasureForeground {
			k := key(o)
			for name, v := range bg[k] {
				figs[name] = v
			}
			if r, ok := ref[k]; ok && o.Step.Labels["tos"] != "0" {
				figs["reference_latency_ms.p99"] = r
			}
		}
		return figs, ser
	})
	for i := range rows {
		rows[i].Errors = append(rows[i].Errors, bgErrs[rows[i].Labels[labelPlacement]+"\x00"+rows[i].Labels[LabelVariant]]...)
		if tos, err := strconv.Atoi(rows[i].Labels["tos"]); err == nil {
			rows[i].Median["tos"], rows[i].Median["dscp"] = float64(tos), float64(tos>>2)
		}
		delete(rows[i].Labels, "tos")
		// The row's connection names its placement; the JSON also says
		// it in the --set form (placement: same-node, cross-node), outside
		// the row's name.
		for short, conn := range placementConnection {
			if conn == rows[i].Labels[labelPlacement] {
				if rows[i].Texts == nil {
					rows[i].Texts = map[string]string{}
				}
				rows[i].Texts[labelPlacement] = short
			}
		}
		delete(rows[i].Labels, labelPlacement)
	}
	setWireEncap(rows, outcomes)
	for _, v := range Verdicts(rows) {
		for i := range rows {
			if rows[i].Labels[LabelVariant] == v.Variant && rows[i].Connection == v.Connection {
				rows[i].Labels[LabelVerdict] = v.Text
			}
		}
	}
	return rows
}

// qosFigures picks a step's figures under the probes' names: the
// foreground's as they are, the ping's RTT as rtt_ms (ping's loss as
// ping.loss_pct), the background's receiver rate as
// background_throughput_bps.
func qosFigures(o suite.Outcome) (map[string]float64, map[string][]float64) {
	m := probe.Metrics(o.Result)
	out := map[string]float64{}
	pick := func(from, to string) {
		if v, ok := m[from]; ok {
			out[to] = v
		}
	}
	switch o.Step.Measure {
	case MeasureForeground:
		for _, k := range []string{"min", "avg", "p50", "p90", "p99", "max", "stdev"} {
			pick("latency_ms."+k, "latency_ms."+k)
		}
		pick("jitter_ms", "jitter_ms")
		pick("loss_pct", "loss_pct")
		pick("pps", "pps")
		pick("dscp_received", "dscp_received")
		if h := o.Result.Histogram; h != nil && len(h.Counts) > 0 {
			// The latency histogram (the first repetition's) as a series.
			counts := make([]float64, len(h.Counts))
			for i, c := range h.Counts {
				counts[i] = float64(c)
			}
			out["latency_histogram_bin_us"] = h.BinWidthUs
			return out, map[string][]float64{"latency_histogram": counts}
		}
	case suite.MeasurePing:
		for _, k := range []string{"min", "avg", "p50", "p90", "p99", "max", "stdev"} {
			pick("rtt_ms."+k, "rtt_ms."+k)
		}
		pick("loss_pct", "ping.loss_pct")
	case MeasureWire:
		return wireFigures(o), nil
	case MeasureBackground:
		pick("throughput_bps.receiver", "background_throughput_bps")
		pick("loss_pct", "background_loss_pct")
	}
	return out, nil
}
