package qospriority

import (
	"fmt"
	"strconv"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// Rows implements Suite: one row per variant and marking with the
// foreground's one-way latency, jitter, loss, rate, throughput and
// transfer, its latency histogram (summed over the repetitions), the
// marked ping's RTT and the background's throughput at the receiver
// (summed over its flows; medians over the repetitions), each labelled
// with its variant's verdict.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	type vr struct {
		placement, variant string
		rep                int
	}
	key := func(o suite.Outcome) vr {
		return vr{o.Step.Labels[labelPlacement], o.Step.Labels[LabelVariant], o.Step.Repeat}
	}
	bgFlows := map[vr][]map[string]float64{}
	bgErrs := map[string][]string{}
	var marked []suite.Outcome
	for _, o := range outcomes {
		if o.Step.Measure != MeasureBackground {
			marked = append(marked, o)
			continue
		}
		k := key(o)
		if o.Err == "" && o.Result != nil {
			figs, _ := qosFigures(o)
			figs["background_dscp"] = 0
			if o.Step.Spec.TOS != nil {
				figs["background_dscp"] = float64(*o.Step.Spec.TOS >> 2)
			}
			figs["background_flows"] = float64(max(o.Step.Spec.Streams, 1))
			bgFlows[k] = append(bgFlows[k], figs)
		} else {
			msg := o.Err
			if msg == "" {
				msg = "no result"
			}
			bgErrs[k.placement+"\x00"+k.variant] = append(bgErrs[k.placement+"\x00"+k.variant], fmt.Sprintf("background #%d: %s", o.Step.Repeat+1, msg))
		}
	}
	bg := map[vr]map[string]float64{}
	for k, flows := range bgFlows {
		bg[k] = backgroundFigures(flows)
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
	hists := mergedHistograms(marked)
	for i := range rows {
		rows[i].Errors = append(rows[i].Errors, bgErrs[rows[i].Labels[labelPlacement]+"\x00"+rows[i].Labels[LabelVariant]]...)
		if h, ok := hists[histKey(rows[i].Labels)]; ok {
			if rows[i].Series == nil {
				rows[i].Series = map[string][]float64{}
			}
			rows[i].Series["latency_histogram"] = h.counts
			for _, m := range []map[string]float64{rows[i].Median, rows[i].Min, rows[i].Max} {
				m["latency_histogram_bin_us"], m["latency_histogram_repetitions"] = h.binUs, float64(h.reps)
			}
		}
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
		// What the foreground sent and what arrived: beside a flood that
		// fills the queue, its throughput shows whether it kept its rate.
		for _, k := range []string{"throughput_bps.sender", "throughput_bps.receiver", "bytes.sender", "bytes.receiver"} {
			pick(k, k)
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

// backgroundFigures are one phase's background figures from its flows':
// the throughput summed, the loss the mean of the flows' (they send at
// equal rates), the flows counted.
func backgroundFigures(flows []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	var loss []float64
	for _, f := range flows {
		if v, ok := f["background_throughput_bps"]; ok {
			out["background_throughput_bps"] += v
		}
		if v, ok := f["background_loss_pct"]; ok {
			loss = append(loss, v)
		}
		out["background_flows"] += f["background_flows"]
		out["background_dscp"] = f["background_dscp"]
	}
	if len(loss) > 0 {
		sum := 0.0
		for _, v := range loss {
			sum += v
		}
		out["background_loss_pct"] = sum / float64(len(loss))
	}
	return out
}

// histogram is a row's latency histogram summed over its repetitions.
type histogram struct {
	binUs  float64
	counts []float64
	reps   int
}

func histKey(labels map[string]string) string {
	return labels[labelPlacement] + "\x00" + labels[LabelVariant] + "\x00" + labels[LabelMarking]
}

// mergedHistograms sums the foregrounds' latency histograms per
// placement, variant and marking over the repetitions, bin by bin (the
// QoS study averaged five runs' histograms: divide by
// latency_histogram_repetitions for that). A histogram whose bin width
// differs from the first one's (a run planned otherwise) is left out.
func mergedHistograms(outcomes []suite.Outcome) map[string]*histogram {
	out := map[string]*histogram{}
	for _, o := range outcomes {
		if o.Step.Measure != MeasureForeground || o.Err != "" || o.Result == nil || o.Result.Histogram == nil || len(o.Result.Histogram.Counts) == 0 {
			continue
		}
		h := o.Result.Histogram
		k := histKey(o.Step.Labels)
		m, ok := out[k]
		if !ok {
			m = &histogram{binUs: h.BinWidthUs}
			out[k] = m
		}
		if h.BinWidthUs != m.binUs {
			continue
		}
		if len(h.Counts) > len(m.counts) {
			m.counts = append(m.counts, make([]float64, len(h.Counts)-len(m.counts))...)
		}
		for i, c := range h.Counts {
			m.counts[i] += float64(c)
		}
		m.reps++
	}
	return out
}
