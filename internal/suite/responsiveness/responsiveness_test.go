package responsiveness_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/qosspec"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/responsiveness"
	"github.com/cnperf/cnperf/internal/suite/suitetest"
)

func plan(t *testing.T, set map[string]string, caps suite.Caps) []suite.Phase {
	t.Helper()
	o := suite.DefaultOptions()
	o.Repeat, o.Set = 1, set
	phases, err := responsiveness.Suite{}.Plan(suitetest.LabAgents(), o, caps)
	if err != nil {
		t.Fatal(err)
	}
	return phases
}

// TestPlan: per path an idle phase (the two probes) and a loaded phase
// (streams both ways, the probes started after the streams, watches on
// the host agents); a bottleneck on the sending node of the paths
// between nodes only.
func TestPlan(t *testing.T) {
	phases := plan(t, map[string]string{"bottleneck": "100M"}, suitetest.LabCaps())
	paths := []string{suite.PodPodSameNode, suite.PodPodCrossNode, suite.NodeNode, suite.PodService}
	if len(phases) != 2*len(paths) {
		t.Fatalf("%d phases, want idle and loaded for %d paths", len(phases), len(paths))
	}
	for i, path := range paths {
		idle, loaded := phases[2*i], phases[2*i+1]
		count := map[string]int{}
		for _, st := range loaded.Steps {
			count[st.Measure]++
			if st.Connection != path {
				t.Errorf("%s: step of %s", path, st.Connection)
			}
			switch st.Measure {
			case responsiveness.MeasureStream:
				if !st.Exclusive || st.Spec.Congestion != "cubic" || st.Spec.Streams != responsiveness.DefaultStreams ||
					st.Spec.Duration.D() <= st.Spec.StartDelay.D()+5*time.Second {
					t.Errorf("%s stream %+v: want exclusive, cubic, %d streams (RRUL's), outlasting the probes", path, st.Spec, responsiveness.DefaultStreams)
				}
			case responsiveness.MeasureRR, responsiveness.MeasureUDP, responsiveness.MeasureQueue:
				if st.Exclusive || st.Spec.StartDelay.D() <= 0 {
					t.Errorf("%s %s: want shared and started after the streams", path, st.Measure)
				}
			}
			if st.Measure == responsiveness.MeasureQueue && !st.Src.HostNetwork {
				t.Errorf("%s: a watch on a pod agent", path)
			}
		}
		perAgent := map[string]int{}
		for _, st := range loaded.Steps {
			perAgent[st.Src.ID]++
		}
		for id, n := range perAgent {
			if n > 4 {
				t.Errorf("%s: agent %s runs %d tasks at once; an agent runs at most 4, a fifth waits for the streams to end", path, id, n)
			}
		}
		wantWatches := 2
		if path == suite.PodPodSameNode {
			wantWatches = 1
		}
		if !loaded.Concurrent || count[responsiveness.MeasureStream] != 2 || count[responsiveness.MeasureRR] != 1 ||
			count[responsiveness.MeasureUDP] != 1 || count[responsiveness.MeasureQueue] != wantWatches {
			t.Errorf("%s loaded phase: concurrent %v, steps %v; want 2 streams, rr, udp, %d watches", path, loaded.Concurrent, count, wantWatches)
		}
		if len(idle.Steps) != 2 || idle.Concurrent {
			t.Errorf("%s idle phase: %d steps, concurrent %v", path, len(idle.Steps), idle.Concurrent)
		}
		crosses := path != suite.PodPodSameNode
		var bottleneck *suite.Change
		for _, ph := range []suite.Phase{idle, loaded} {
			for i, c := range ph.Changes {
				if c.What == suite.CapNodeQdisc {
					bottleneck = &ph.Changes[i]
				}
			}
		}
		if crosses != (bottleneck != nil) {
			t.Errorf("%s: bottleneck %v, want one only between nodes", path, bottleneck)
		}
		if bottleneck != nil && (bottleneck.QoS.Setup != qosspec.SpecBottleneck || bottleneck.QoS.RateBps != 100e6 ||
			bottleneck.QoS.QueueBytes != 250000 || bottleneck.Member != loaded.Steps[0].Src.Node) {
			t.Errorf("%s: bottleneck %+v on %s, want a 100 Mbit/s FIFO of 20 ms (250,000 B) on the sender's node", path, *bottleneck.QoS, bottleneck.Member)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	cases := []struct {
		name string
		set  map[string]string
		caps suite.Caps
		want string
	}{
		{"bad path", map[string]string{"paths": "pod-pod"}, suitetest.LabCaps(), "path \"pod-pod\""},
		{"no node qdisc", map[string]string{"bottleneck": "100M"}, suite.Caps{}, "put a qdisc on a node's uplink"},
		{"no service", map[string]string{"paths": "pod-service"}, suite.Caps{Have: []suite.Cap{suite.CapNodeQdisc}}, "service"},
		{"tiny queue", map[string]string{"bottleneck": "100k"}, suitetest.LabCaps(), "bottleneck-queue"},
		{"bad congestion", map[string]string{"congestion": "Cubic!"}, suitetest.LabCaps(), "congestion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := suite.DefaultOptions()
			o.Set = tc.set
			_, err := responsiveness.Suite{}.Plan(suitetest.LabAgents(), o, tc.caps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// outcomes gives every step of the phases a result: round trips of idle
// ms idle and loaded ms loaded, streams at fwd bit/s, and watches whose
// busiest link holds a median of backlog bytes (withP50; else none given)
// and a mean of 90 % of it, and drops, on the sending node.
func outcomes(phases []suite.Phase, idle, loaded, backlog float64, withP50 bool, fwd float64, drops uint64) []suite.Outcome {
	var outs []suite.Outcome
	for _, ph := range phases {
		for _, st := range ph.Steps {
			r := &probe.Result{Kind: st.Spec.Kind}
			ms := idle
			if st.Labels[responsiveness.LabelLoad] == responsiveness.LoadLoaded {
				ms = loaded
			}
			switch st.Measure {
			case responsiveness.MeasureRR:
				r.RTTms = &probe.Summary{P50: ms, P99: 2 * ms, Count: 100}
				r.RTTTrimmedMs = probe.Float(ms)
				r.LossPct = probe.Float(0)
			case responsiveness.MeasureUDP:
				r.LatencyMs = &probe.Summary{P50: ms / 2, Count: 100}
			case responsiveness.MeasureStream:
				r.ThroughputBps = &probe.SenderReceiver{Sender: fwd, Receiver: fwd}
				r.Retransmits = probe.Int64(5)
			case responsiveness.MeasureQueue:
				b, d := 0.0, uint64(0)
				if st.Labels[responsiveness.LabelAt] == responsiveness.AtSender {
					b, d = backlog, drops
				}
				l := probe.LinkQueue{Link: "eth0", MeanBacklogBytes: 0.9 * b, Drops: d}
				if withP50 {
					l.P50BacklogBytes = probe.Float(b)
				}
				r.Queue = &probe.QueueWatch{Toward: "eth0", Samples: 10, SoftnetSqueezed: probe.Int64(0), Links: []probe.LinkQueue{l}}
			}
			outs = append(outs, suite.Outcome{Step: st, Result: r})
		}
	}
	return outs
}

// TestRowsAndVerdicts: a row per path with idle and loaded round trips,
// the rise, RPM, the streams' rates; the queue placed from the watches'
// backlog against the rise, and under a bottleneck the rise against both
// the FIFO's full delay (limit/rate) and the delay its queue held (its
// median backlog at its rate, its mean from a watch without a median).
// When the FIFO ran below FullFillPct the verdict says it was not kept
// full and why, from the counters.
func TestRowsAndVerdicts(t *testing.T) {
	cases := []struct {
		name            string
		loaded, backlog float64 // ms, median bytes
		noP50           bool
		fwd             float64 // the streams' rate
		drops           uint64
		wantAt          string
		want            []string // in the verdict
		notWant         string   // not in the verdict
	}{
		// 250,000 B at 100 Mbit/s is 20 ms.
		{"FIFO near full", 18.05, 225000, false, 92e6, 40, "sender's qdisc", []string{
			"loaded p50 rose 18.0 ms: 90 % of the FIFO's limit/rate (250000 B at 100 Mbit/s: 20.0 ms), within 20 %; the FIFO ran near full (median backlog 90 % of its limit): 100 % of the 18.0 ms its median backlog of 225000 B takes at its rate"},
			"not kept full"},
		{"FIFO full, rise beyond it", 30.05, 250000, false, 92e6, 40, "sender's qdisc", []string{
			"rose 30.0 ms: 150 % of the FIFO's limit/rate", "not within 20 %; the FIFO ran near full", "150 % of the 20.0 ms"}, "not kept full"},
		{"FIFO part full after drops", 14.75, 181250, false, 92e6, 40, "sender's qdisc", []string{
			"rose 14.7 ms: 74 % of the FIFO's limit/rate (250000 B at 100 Mbit/s: 20.0 ms), not within 20 %, but the FIFO was not kept full (median backlog 72 % of its limit, under 80 %)",
			"it dropped 40 packets and the loss-based streams backed off at each drop, draining it below its limit", "(forward 92 Mbit/s; more streams",
			"101 % of the 14.5 ms its median backlog of 181250 B takes at its rate, within 20 %"}, "ran near full"},
		{"FIFO part full, no drops", 14.75, 181250, false, 92e6, 0, "sender's qdisc", []string{
			"not kept full", "it dropped nothing: the senders never filled it"}, "backed off"},
		{"FIFO part full, streams slow", 14.75, 181250, false, 50e6, 0, "sender's qdisc", []string{
			"not kept full", "it dropped nothing and the forward streams ran at 50 Mbit/s, under 90 % of its rate"}, "backed off"},
		{"no median: the mean", 13.1, 181250 / 0.9, true, 92e6, 40, "sender's qdisc", []string{
			"65 % of the FIFO's limit/rate", "mean backlog 72 % of its limit", "90 % of the 14.5 ms its mean backlog of 181250 B"}, "median"},
		{"queue on the path", 10.05, 0, false, 92e6, 0, "path", []string{
			"50 % of the FIFO's limit/rate", "not within 20 %, but the FIFO held no median backlog on the sending node's counters"}, "ran near full"},
		{"no queue", 0.06, 0, false, 92e6, 0, "none", []string{"not within 20 %"}, "ran near full"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			phases := plan(t, map[string]string{"bottleneck": "100M", "paths": "cross-node,same-node"}, suitetest.LabCaps())
			rows := responsiveness.Suite{}.Rows(outcomes(phases, 0.05, tc.loaded, tc.backlog, !tc.noP50, tc.fwd, tc.drops))
			if len(rows) != 2 || rows[0].Connection != suite.PodPodSameNode || rows[1].Connection != suite.PodPodCrossNode {
				t.Fatalf("rows %v, want same node then cross node", rows)
			}
			r := rows[1]
			mean := 0.9 * tc.backlog
			queued := tc.backlog * 8 / 100e6 * 1000 // ms at the FIFO's rate
			if tc.noP50 {
				queued = mean * 8 / 100e6 * 1000
			}
			rise := tc.loaded - 0.05
			for name, want := range map[string]float64{
				responsiveness.FigIdleP50: 0.05, responsiveness.FigLoadedP50: tc.loaded, responsiveness.FigRiseP50: rise,
				responsiveness.FigRiseP99: 2 * rise, responsiveness.FigRPMIdle: 60000 / 0.05,
				responsiveness.FigRPMLoaded: 60000 / tc.loaded, responsiveness.FigForward: tc.fwd, responsiveness.FigBack: tc.fwd,
				responsiveness.FigRetransmits: 10, responsiveness.FigFullDelay: 20, responsiveness.FigExpected: queued,
				responsiveness.FigSenderDelay: mean * 8 / 100e6 * 1000, responsiveness.FigFill: 100 * mean / 250000,
				responsiveness.FigRiseOfFull: 100 * rise / 20, responsiveness.FigSenderDrops: float64(tc.drops),
			} {
				if got, ok := r.Median[name]; !ok || math.Abs(got-want) > 1e-6*math.Max(1, want) {
					t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
				}
			}
			if got, ok := r.Median[responsiveness.FigRiseOfExpect]; ok != (tc.backlog > 0) ||
				(ok && math.Abs(got-100*rise/queued) > 1e-6) {
				t.Errorf("rise of expected %v (%v), want the rise over %v ms, none without a backlog", got, ok, queued)
			}
			if r.Labels[responsiveness.LabelQueueAt] != tc.wantAt {
				t.Errorf("queue at %q, want %q (verdict %q)", r.Labels[responsiveness.LabelQueueAt], tc.wantAt, r.Labels[responsiveness.LabelVerdict])
			}
			v := r.Labels[responsiveness.LabelVerdict]
			for _, w := range tc.want {
				if !strings.Contains(v, w) {
					t.Errorf("verdict %q, want it to say %q", v, w)
				}
			}
			if strings.Contains(v, tc.notWant) {
				t.Errorf("verdict %q says %q", v, tc.notWant)
			}
			if _, ok := rows[0].Median[responsiveness.FigFullDelay]; ok {
				t.Errorf("the same-node row, which crosses no bottleneck, has an expected delay")
			}
		})
	}
}

// TestRowJSONKeepsEveryFigure: every figure of a row under a bottleneck
// reads back from the row's JSON by its dotted name (no figure nested
// under another's name or a label's).
func TestRowJSONKeepsEveryFigure(t *testing.T) {
	phases := plan(t, map[string]string{"bottleneck": "100M", "paths": "cross-node"}, suitetest.LabCaps())
	rows := responsiveness.Suite{}.Rows(outcomes(phases, 0.05, 18.05, 225000, true, 92e6, 40))
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	b, err := json.Marshal(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	for _, name := range (responsiveness.Suite{}).RowMetrics() {
		want, ok := rows[0].Median[name]
		if !ok {
			continue
		}
		var cur any = obj
		for _, p := range strings.Split(name, ".") {
			m, _ := cur.(map[string]any)
			cur = m[p]
		}
		if got, ok := cur.(float64); !ok || math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s reads back as %v from the row's JSON, want %v", name, cur, want)
		}
	}
}
