package probe

import (
	"encoding/json"
	"sort"
)

// Metrics flattens a result's numeric figures into dotted names, the same
// names the JSON uses ("throughput_bps.receiver", "rtt_ms.p99", "loss_pct").
// Arrays (intervals, streams, hops, histogram counts) are left out: they
// are series, not single figures. SLOs, reports and metrics exports name
// figures this way.
func Metrics(r *Result) map[string]float64 {
	out := map[string]float64{}
	if r == nil {
		return out
	}
	b, err := json.Marshal(r)
	if err != nil {
		return out
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		return out
	}
	flatten("", tree, out)
	return out
}

func flatten(prefix string, v any, out map[string]float64) {
	switch t := v.(type) {
	case map[string]any:
		for k, sub := range t {
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			flatten(name, sub, out)
		}
	case float64:
		out[prefix] = t
	case bool:
		if t {
			out[prefix] = 1
		} else {
			out[prefix] = 0
		}
	}
}

// MetricNames returns the sorted names of m.
func MetricNames(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
