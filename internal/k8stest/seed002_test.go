package k8stest

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
)

// seed002Figure is one measurement of seed 002's "Backend Results" table
// (Calico v3.23 on bare metal, iperf3): per backend, its two cross-node
// connections (worker01 -> controller, worker02 -> controller).
type seed002Figure struct {
	label, metric string
	scale         float64 // the metric's unit per printed unit
	unit          string
	vxlan, direct [2]float64
}

// seed002 is the seed's table (002_c218051183d61428.txt), sender and
// receiver bitrate, transfer and CPU, VXLAN and Direct.
var seed002 = []seed002Figure{
	{"Bitrate (sender)", "throughput_bps.sender", 1e9, "Gbit/s", [2]float64{2.58, 2.78}, [2]float64{16.1, 15.4}},
	{"Bitrate (receiver)", "throughput_bps.receiver", 1e9, "Gbit/s", [2]float64{2.57, 2.78}, [2]float64{16.1, 15.4}},
	{"Transfer (sender)", "bytes.sender", 1e9, "GB", [2]float64{3.00, 3.24}, [2]float64{18.7, 17.9}},
	{"Transfer (receiver)", "bytes.receiver", 1e9, "GB", [2]float64{3.00, 3.23}, [2]float64{18.7, 17.9}},
	{"CPU (sender)", "cpu_pct.sender", 1, "%", [2]float64{64.9, 66.0}, [2]float64{73.4, 71.6}},
	{"CPU (receiver)", "cpu_pct.receiver", 1, "%", [2]float64{54.5, 58.3}, [2]float64{76.5, 74.5}},
}

// seed002Table prints seed 002's table from `cnperf compare --format json`
// of two stored baselines (the reference backend first): per connection the
// seed's measurements on each backend, and on Calico the seed's own
// figures beside them. The seed ran 10 s iperf3 tests, the harness 2 s, so
// transfers differ by design; bitrates and CPU are comparable in kind.
func seed002Table(cni string, backends [2]string, compareJSON string) (string, error) {
	var cmp struct {
		Lines []struct {
			Connection, Metric string
			Ref                struct{ Median float64 }
			HasRef             bool
			Others             []struct {
				Stat struct{ Median float64 } `json:"stat"`
			}
		}
	}
	if err := json.Unmarshal([]byte(compareJSON), &cmp); err != nil {
		return "", fmt.Errorf("cnperf compare --format json: %w", err)
	}
	type key struct{ conn, metric string }
	got := map[key][2]float64{}
	var conns []string
	for _, l := range cmp.Lines {
		if len(l.Others) == 0 || !l.HasRef {
			continue
		}
		k := key{l.Connection, l.Metric}
		if _, seen := got[key{l.Connection, ""}]; !seen {
			got[key{l.Connection, ""}] = [2]float64{}
			conns = append(conns, l.Connection)
		}
		got[k] = [2]float64{l.Ref.Median, l.Others[0].Stat.Median}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	head := fmt.Sprintf("CONNECTION\tMEASUREMENT\t%s %s\t%s %s", cni, backends[0], cni, backends[1])
	seedCols := cni == "calico" && backends == [2]string{"vxlan", "direct"}
	if seedCols {
		head += "\tseed VXLAN (w01 / w02)\tseed Direct (w01 / w02)"
	}
	fmt.Fprintln(tw, head)
	rows := 0
	for _, conn := range conns {
		for _, f := range seed002 {
			v, ok := got[key{conn, f.metric}]
			if !ok {
				continue
			}
			line := fmt.Sprintf("%s\t%s\t%.3g %s\t%.3g %s", conn, f.label, v[0]/f.scale, f.unit, v[1]/f.scale, f.unit)
			if seedCols && conn == "pod-pod cross node" {
				line += fmt.Sprintf("\t%.3g / %.3g %s\t%.3g / %.3g %s", f.vxlan[0], f.vxlan[1], f.unit, f.direct[0], f.direct[1], f.unit)
			}
			fmt.Fprintln(tw, line)
			rows++
		}
	}
	tw.Flush()
	if rows == 0 {
		return "", fmt.Errorf("cnperf compare: none of the seed's measurements in %d lines", len(cmp.Lines))
	}
	return b.String(), nil
}
