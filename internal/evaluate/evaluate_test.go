package evaluate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
	"github.com/cnperf/cnperf/internal/suite/netpol"
)

// fakeRunner plans each suite as one phase of one step lasting step, and
// answers each run with the rows of rows[suite]; suites in lacks are
// refused as an environment lacking a capability.
type fakeRunner struct {
	step  time.Duration
	rows  map[string][]suite.Row
	lacks map[string]bool
	agent string // the agents' IP
	ran   []string
}

func (f *fakeRunner) Plan(_ context.Context, s suite.Suite, o suite.Options) ([]suite.Endpoint, []suite.Phase, error) {
	eps := []suite.Endpoint{{ID: "a", IP: f.agent}, {ID: "b", IP: f.agent}}
	if err := suite.CheckKeys(s, o); err != nil {
		return eps, nil, err
	}
	if f.lacks[s.Name()] {
		caps := suite.Caps{Why: map[suite.Cap]string{suite.CapNodeQdisc: "not here",
			suite.CapNetworkPolicy: "the cluster's CNI, flannel, does not enforce NetworkPolicy"}}
		if s.Name() == netpol.SuiteName {
			// The suite's own refusal.
			_, err := s.Plan(eps, o, caps)
			return eps, nil, err
		}
		return eps, nil, caps.Lacks(s.Name(), suite.CapNodeQdisc)
	}
	return eps, []suite.Phase{{Steps: []suite.Step{{Spec: probe.Spec{Duration: probe.Duration(f.step)}}}}}, nil
}

func (f *fakeRunner) Run(_ context.Context, s suite.Suite, o suite.Options) (suite.Report, error) {
	f.ran = append(f.ran, s.Name())
	return suite.Report{Suite: s.Name(), Options: o, Rows: f.rows[s.Name()]}, nil
}

func fig(v float64) map[string]float64 { return map[string]float64{"x": v} }

// cannedRows are rows shaped as each suite gives them.
func cannedRows() map[string][]suite.Row {
	row := func(conn string, labels map[string]string, m map[string]float64) suite.Row {
		return suite.Row{Connection: conn, Labels: labels, Median: m, Min: m, Max: m, Repetitions: 1}
	}
	return map[string][]suite.Row{
		"baseline": {
			row(suite.NodeNode, nil, map[string]float64{"throughput_bps.receiver": 10e9}),
			row(suite.PodPodCrossNode, nil, map[string]float64{"throughput_bps.receiver": 8e9}),
		},
		"capacity": {row(suite.PodPodCrossNode, nil, map[string]float64{"capacity_bps": 5e9, "retest_pass": 1})},
		"qos-priority": {
			row(suite.PodPodCrossNode, map[string]string{"variant": "fifo", "marking": "none"}, map[string]float64{"tos": 0, "latency_ms.p99": 10}),
			row(suite.PodPodCrossNode, map[string]string{"variant": "fifo", "marking": "EF"},
				map[string]float64{"tos": 184, "dscp": 46, "dscp_received": 46, "latency_ms.p99": 0.1, "reference_latency_ms.p99": 10}),
		},
		"shaping": {row(suite.PodPodCrossNode, map[string]string{"placement": "cross-node", "verdict": "limit held: ..."},
			map[string]float64{"steady_state_error_pct": 1, "overshoot_pct": 20, "time_to_conform_s": 0.2})},
		"policing": {row(suite.PodPodCrossNode, map[string]string{"placement": "cross-node", "variant": "cni-ingress", "verdict": "cni-ingress: limit not held"},
			map[string]float64{"steady_state_error_pct": 30, "loss_pct": 12})},
		"contention": {row(suite.PodPodCrossNode, map[string]string{"placement": "cross-node", "proto": "tcp", "flow": "all", "backed_off": "yes"},
			map[string]float64{"fairness_index": 0.99})},
		"pmtu": {row(suite.PodPodCrossNode, nil, map[string]float64{"path_mtu": 1450, "black_hole": 0})},
		"responsiveness": {row(suite.PodPodCrossNode, map[string]string{"bottleneck": "none", "queue_at": "none",
			"verdict": "no standing queue: loaded p50 0.1 ms against idle 0.09 ms"},
			map[string]float64{"idle.rtt_ms.p50": 0.09, "loaded.rtt_ms.p50": 0.1, "rise_ms.p50": 0.01, "rpm.idle": 600000, "rpm.loaded": 550000})},
		"netpol": {
			row(suite.PodPodCrossNode, map[string]string{"policies": "0", "select": "none"},
				map[string]float64{"throughput_bps.receiver": 9e9, "rr_per_s": 20000, "crr_per_s": 5000, "crr_vs_none_pct": 100}),
			row(suite.PodPodCrossNode, map[string]string{"policies": "100", "select": "pair"},
				map[string]float64{"throughput_bps.receiver": 8e9, "rr_per_s": 19000, "crr_per_s": 4000, "throughput_vs_none_pct": 88.9, "crr_vs_none_pct": 80}),
		},
	}
}

// linesOf groups a sheet's lines by question.
func linesOf(s Sheet) map[string][]Line {
	m := map[string][]Line{}
	for _, l := range s.Lines {
		m[l.Question] = append(m[l.Question], l)
	}
	return m
}

func TestEvaluateAnswersEveryQuestion(t *testing.T) {
	slo, err := suite.ParseSLOs([]byte(`{"apiVersion":"cnperf/v1","objectives":[{"expr":"throughput_bps.receiver >= 1G"}]}`), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		budget time.Duration
		lacks  map[string]bool
		slo    []suite.Objective
		only   []string
		agent  string
		// want maps a question to the verdict of its first line and a
		// piece of its reason.
		want map[string][2]string
	}{
		{name: "all fit", budget: time.Hour, slo: slo, agent: "10.0.0.1", want: map[string][2]string{
			QOverlay: {Measured, ""}, QCapacity: {Holds, "re-test"}, QDSCP: {Holds, "arrived"}, QPriority: {Holds, "protected"},
			QShaping: {Holds, "limit held"}, QIngress: {Fails, "not held"}, QFairness: {Holds, "backed off"},
			QMTU: {Holds, "no black hole"}, QLatency: {Holds, "no standing queue"},
			QPolicy: {NotAsked, "opt-in not given: --questions policy"}, QIPv6: {NotAsked, "IPv4"}, QSLO: {Holds, ""}}},
		{name: "budget", budget: 10 * time.Second, agent: "10.0.0.1", want: map[string][2]string{
			QOverlay: {Measured, ""}, QCapacity: {NotAsked, "budget"}, QLatency: {NotAsked, "budget"}, QSLO: {NotAsked, "opt-in not given: --slo"}}},
		{name: "policy over budget", budget: 8 * time.Second, only: []string{QOverlay, QPolicy}, agent: "10.0.0.1", want: map[string][2]string{
			QOverlay: {Measured, ""}, QPolicy: {NotAsked, "budget"}}},
		{name: "lacking", budget: time.Hour, lacks: map[string]bool{"contention": true, "netpol": true}, agent: "fd00::1", want: map[string][2]string{
			QFairness: {NotAsked, "capability lacking"}, QPolicy: {NotAsked, "capability lacking: suite netpol needs"}, QIPv6: {Measured, "IPv6"}}},
		{name: "policy refused though chosen", budget: time.Hour, lacks: map[string]bool{"netpol": true}, only: []string{QPolicy}, agent: "10.0.0.1",
			want: map[string][2]string{QPolicy: {NotAsked, "flannel, does not enforce NetworkPolicy"}}},
		{name: "chosen", budget: time.Hour, only: []string{QMTU}, agent: "10.0.0.1", want: map[string][2]string{
			QOverlay: {NotAsked, "not chosen"}, QMTU: {Holds, ""}, QLatency: {NotAsked, "not chosen"}}},
		{name: "policy chosen", budget: time.Hour, only: []string{QPolicy, QLatency}, agent: "10.0.0.1", want: map[string][2]string{
			QPolicy: {Measured, "the reference"}, QLatency: {Holds, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &fakeRunner{step: 3 * time.Second, rows: cannedRows(), lacks: c.lacks, agent: c.agent}
			res, err := Evaluate(context.Background(), r, builtin.Registry(),
				Config{Budget: c.budget, Objectives: c.slo, Only: c.only, Options: suite.Options{Time: time.Second, Repeat: 1}})
			if err != nil {
				t.Fatal(err)
			}
			by := linesOf(res.Sheet)
			for _, q := range IDs() {
				ls := by[q]
				if len(ls) == 0 {
					t.Errorf("question %s has no line", q)
				}
				for _, l := range ls {
					if l.Verdict == "" || l.Reason == "" {
						t.Errorf("question %s: line without verdict or reason: %+v", q, l)
					}
				}
			}
			for q, w := range c.want {
				if len(by[q]) == 0 {
					continue
				}
				l := by[q][0]
				if l.Verdict != w[0] || !strings.Contains(l.Reason, w[1]) {
					t.Errorf("%s: %s / %q, want %s / …%s…", q, l.Verdict, l.Reason, w[0], w[1])
				}
			}
			// qos-priority answers two questions with one run.
			n := 0
			for _, s := range r.ran {
				if s == "qos-priority" {
					n++
				}
			}
			if n > 1 {
				t.Errorf("qos-priority ran %d times", n)
			}
		})
	}
}

func TestEvaluateRefusesUnknownQuestion(t *testing.T) {
	_, err := Evaluate(context.Background(), &fakeRunner{}, builtin.Registry(), Config{Only: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `unknown question "nope"`) {
		t.Fatalf("err %v", err)
	}
}

func TestEstimate(t *testing.T) {
	step := func(d time.Duration) suite.Step { return suite.Step{Spec: probe.Spec{Duration: probe.Duration(d)}} }
	ping := suite.Step{Spec: probe.Spec{Count: 10, Interval: probe.Duration(100 * time.Millisecond)}}
	cases := []struct {
		name    string
		phases  []suite.Phase
		follows bool
		want    time.Duration
	}{
		{"serial", []suite.Phase{{Steps: []suite.Step{step(time.Second), step(2 * time.Second)}}}, false, phaseOverhead + 3*time.Second + 2*stepOverhead},
		{"concurrent", []suite.Phase{{Concurrent: true, Steps: []suite.Step{step(time.Second), step(2 * time.Second)}}}, false, phaseOverhead + 2*time.Second + stepOverhead},
		{"ping", []suite.Phase{{Steps: []suite.Step{ping}}}, false, phaseOverhead + time.Second + stepOverhead},
		{"search", []suite.Phase{{Steps: []suite.Step{step(time.Second)}}}, true, followerRounds * (phaseOverhead + time.Second + stepOverhead)},
	}
	for _, c := range cases {
		if got := Estimate(c.phases, c.follows); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestJudgeFromSuiteLogic(t *testing.T) {
	row := func(labels map[string]string, m map[string]float64) suite.Row {
		return suite.Row{Connection: suite.PodPodCrossNode, Labels: labels, Median: m, Min: m, Max: m}
	}
	cases := []struct {
		name, suite string
		rows        []suite.Row
		want        []string // verdicts in order
	}{
		{"mark lost at encapsulation", "qos-priority", []suite.Row{
			row(map[string]string{"variant": "vxlan", "marking": "none"}, map[string]float64{"tos": 0, "latency_ms.p99": 12}),
			row(map[string]string{"variant": "vxlan", "marking": "EF"}, map[string]float64{"tos": 184, "dscp": 46, "dscp_received": 46,
				"latency_ms.p99": 12, "reference_latency_ms.p99": 12, "wire_dscp.outer": 0, "wire_dscp.inner": 46}),
		}, []string{Partial, Fails}}, // dscp, then priority
		{"mark bleached", "qos-priority", []suite.Row{
			row(map[string]string{"variant": "as-is", "marking": "EF"}, map[string]float64{"tos": 184, "dscp": 46, "dscp_received": 0, "latency_ms.p99": 0.1}),
		}, []string{Fails, Unknown}},
		{"capacity varies", "capacity", []suite.Row{row(nil, map[string]float64{"capacity_bps": 1e9, "retest_pass": 0})}, []string{Fails}},
		{"udp does not back off", "contention", []suite.Row{
			row(map[string]string{"flow": "1", "proto": "udp"}, map[string]float64{"throughput_bps.receiver": 1}),
			row(map[string]string{"flow": "all", "proto": "udp", "placement": "same-node", "backed_off": "no"}, map[string]float64{"fairness_index": 0.5}),
		}, []string{Fails}},
		{"overlay faster than the node", "baseline", []suite.Row{{Connection: suite.PodPodSameNode, OverheadPct: ptr(-20),
			Median: map[string]float64{"throughput_bps.receiver": 12e9}}}, []string{Measured}},
		{"service faster than the pods", "baseline", []suite.Row{{Connection: suite.PodService,
			ServiceOverhead: &suite.ServiceOverhead{TCPPct: ptr(-12.2), RRAddedMs: ptr(-0.002)},
			Median:          map[string]float64{"throughput_bps.receiver": 11e9}}}, []string{Measured}},
		{"black hole", "pmtu", []suite.Row{row(nil, map[string]float64{"path_mtu": 1400, "black_hole": 1, "black_hole_size": 1450})}, []string{Fails}},
		{"no standing queue", "responsiveness", []suite.Row{
			row(map[string]string{"queue_at": "none", "verdict": "no standing queue: ..."}, map[string]float64{"idle.rtt_ms.p50": 0.1, "loaded.rtt_ms.p50": 0.12, "rise_ms.p50": 0.02}),
		}, []string{Holds}},
		{"queue in a qdisc, on the path, not located, not measured", "responsiveness", []suite.Row{
			row(map[string]string{"queue_at": "sender's qdisc", "verdict": "queue in the sender's qdisc"}, map[string]float64{"rise_ms.p50": 5}),
			row(map[string]string{"queue_at": "path", "verdict": "queue on the path"}, map[string]float64{"rise_ms.p50": 2}),
			row(map[string]string{"queue_at": "unknown", "verdict": "loaded p50 rose 2 ms; no queue watch"}, map[string]float64{"rise_ms.p50": 2}),
			row(map[string]string{"queue_at": "unknown", "verdict": "no idle and loaded round trips to compare"}, map[string]float64{"rpm.idle": 1000}),
		}, []string{Fails, Fails, Fails, Unknown}},
		{"policy cost, deny kept, enforcement", "netpol", []suite.Row{
			row(map[string]string{"policies": "0", "select": "none"}, map[string]float64{"throughput_bps.receiver": 9e9, "crr_per_s": 5000}),
			row(map[string]string{"policies": "100", "select": "other"}, map[string]float64{"throughput_bps.receiver": 9e9, "crr_per_s": 4900, "crr_vs_none_pct": 98}),
			row(map[string]string{"policies": "100", "select": "pair"}, map[string]float64{"crr_per_s": 1}), // no no-policy figure
			row(map[string]string{"policies": "deny", "established": "kept", "new": "refused"}, nil),
			row(map[string]string{"policies": "enforce"}, map[string]float64{"deny_latency_p50_ms": 3, "deny_latency_p99_ms": 9}),
		}, []string{Measured, Measured, Measured, Measured, Measured}},
		{"deny not enforced, partly, not measured; no enforcement", "netpol", []suite.Row{
			row(map[string]string{"policies": "deny", "established": "kept", "new": "allowed"}, nil),
			row(map[string]string{"policies": "deny", "established": "cut", "new": "refused in 2 of 3"}, nil),
			row(map[string]string{"policies": "deny", "established": "not measured", "new": "not measured"}, nil),
			{Connection: suite.PodPodCrossNode, Labels: map[string]string{"policies": "enforce"}, Errors: []string{"sample 1: no connect failed after the deny"}},
			row(map[string]string{"policies": "10", "select": "pair"}, nil),
		}, []string{Fails, Partial, Unknown, Unknown, Unknown}},
		{"police unsupported", "policing", []suite.Row{
			{Connection: "police", Labels: map[string]string{"variant": "police", "placement": "same-node", "verdict": "police: not measured: kernel lacks it"}},
		}, []string{NotAsked}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := Judge(c.suite, c.rows)
			for _, l := range lines {
				if strings.Contains(l.Reason, "-") && (strings.Contains(l.Reason, "% less") || strings.Contains(l.Reason, "costs")) {
					t.Errorf("a negative cost: %s", l.Reason)
				}
			}
			var got []string
			for _, l := range lines {
				got = append(got, l.Verdict)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("verdicts %v, want %v (lines %+v)", got, c.want, lines)
			}
		})
	}
}

func ptr(v float64) *float64 { return &v }
